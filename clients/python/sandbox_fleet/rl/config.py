"""agent-sandbox-rl's configuration classes, as plain dataclasses with its
field names, defaults and checks (a bad value raises ValueError naming the
field as the reference spells it), and their translation into the fleet
configuration serve reads (examples/fleet.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PLACEMENTS = ("round-robin", "least-loaded", "capacity-weighted", "image-affinity")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
KEEPALIVE_COMMAND = ["sleep", "infinity"]
DEFAULT_LABELS = {"app": "agent-sandbox-rl"}


def _check(ok: bool, where: str, why: str) -> None:
    if not ok:
        raise ValueError(f"{where}: {why}")


@dataclass
class ResourceSpec:
    """Per-sandbox container resources (requests; limits where given)."""

    cpu: str = "250m"
    memory: str = "512Mi"
    cpu_limit: str | None = None
    memory_limit: str | None = None


@dataclass
class TemplateSpec:
    """How each image's sandbox Pod is rendered."""

    resources: ResourceSpec = field(default_factory=ResourceSpec)
    keepalive_command: list[str] = field(default_factory=lambda: list(KEEPALIVE_COMMAND))
    runtime_class: str | None = None
    node_selector: dict[str, str] | None = None
    image_pull_secret: str | None = None
    image_pull_policy: str = "IfNotPresent"
    colocate_replicas: bool = False
    extra_pod_spec: dict[str, Any] = field(default_factory=dict)
    extra_template_spec: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check(self.image_pull_policy in PULL_POLICIES, "TemplateSpec.image_pull_policy",
               f"{self.image_pull_policy!r} must be Always|IfNotPresent|Never")


@dataclass
class ObservabilityConfig:
    """Metrics and tracing toggles. serve exports its metrics and spans
    itself (``--metrics-addr``, OTEL_EXPORTER_OTLP_ENDPOINT); the RunReport
    is always kept."""

    enable_metrics: bool = True
    enable_tracing: bool = False
    trace_service_name: str = "agent-sandbox-rl"


@dataclass
class FailFastPolicy:
    """Giving up sandboxes that cannot start: terminal reasons at once;
    retryable back-offs after ``grace_s``, an unschedulable sandbox after
    ``unschedulable_grace_s`` (None: not before ready_timeout, the
    reference's default)."""

    enabled: bool = True
    grace_s: float | None = None
    unschedulable_grace_s: float | None = None


@dataclass
class ClusterConfig:
    """One target cluster (and node pool)."""

    name: str = "default"
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    namespace: str = "default"
    node_selector: dict[str, str] | None = None
    runtime_class: str | None = None
    image_pull_secret: str | None = None
    weight: float = 1.0
    max_replicas: int | None = None

    def __post_init__(self) -> None:
        _check(self.weight > 0, "ClusterConfig.weight", "cluster weight must be > 0")
        _check(bool(self.name), "ClusterConfig.name", "cluster name must be non-empty")


@dataclass
class FleetConfig:
    """The fleet: its clusters and the orchestration knobs."""

    clusters: list[ClusterConfig] = field(default_factory=list)
    placement: str = "image-affinity"
    max_concurrent: int = 1
    max_warmpool_size: int = 8
    warm_per_task: bool = False
    window_size: int | None = None
    ready_timeout: int = 900
    warm_create_budget: int = 1000
    overcommit_factor: float = 1.5
    max_live_sandboxes: int | None = None
    breaker_poll_s: float = 5.0
    breaker_trip_polls: int = 3
    install_teardown_hooks: bool = True
    template: TemplateSpec = field(default_factory=TemplateSpec)
    template_name_prefix: str = "r2e-img-"
    labels: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_LABELS))
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    fail_fast: FailFastPolicy = field(default_factory=FailFastPolicy)
    avg_image_gb: float | None = None
    node_ephemeral_gb: float | None = None
    disk_headroom: float = 0.25
    cluster_nodes: int | None = None
    # prepull(): images each node pulls at once (the reference's DaemonSets
    # at a time); whether the nodes remove the images when the job goes.
    # The node agent pulls through the runtime, not through Pods, so
    # images_per_pod and drop_caches change nothing (prepull() says so).
    # prepull_high_water is this package's, not the reference's: the
    # percent of a node's image filesystem past which its agent stops
    # pulling (the node agent's own cap, 85 as shipped, still holds).
    prepull_max_parallel: int = 4
    prepull_high_water: int = 80
    prepull_delete_when_done: bool = False
    prepull_images_per_pod: int = 25
    prepull_drop_caches: bool = False

    def __post_init__(self) -> None:
        for name in ("max_concurrent", "max_warmpool_size"):
            _check(getattr(self, name) >= 1, f"FleetConfig.{name}", "must be >= 1")
        for name in ("avg_image_gb", "node_ephemeral_gb"):
            v = getattr(self, name)
            _check(v is None or v > 0, f"FleetConfig.{name}", "disk size hints must be > 0 or None")
        _check(0 <= self.disk_headroom < 1, "FleetConfig.disk_headroom", "disk_headroom must be in [0, 1)")
        for name in ("window_size", "cluster_nodes"):
            v = getattr(self, name)
            _check(v is None or v >= 1, f"FleetConfig.{name}", "must be >= 1 or None")
        _check(self.placement in PLACEMENTS, "FleetConfig.placement",
               f"unknown placement {self.placement!r}; choose from {sorted(PLACEMENTS)}")
        sample = self.template_name_prefix + "0" * 12
        _check(len(sample) <= 253 and re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", sample)
               is not None, "FleetConfig.template_name_prefix",
               f"must yield a DNS-1123 subdomain when combined with the 12-char image hash; got a name like {sample!r}")
        _check(self.ready_timeout > 0, "FleetConfig.ready_timeout", "must be > 0 seconds")
        _check(self.warm_create_budget >= 0, "FleetConfig.warm_create_budget", "must be >= 0 (0 = all at once)")
        _check(1 <= self.prepull_max_parallel <= 16, "FleetConfig.prepull_max_parallel", "must be 1 to 16 (images a node pulls at once)")
        _check(1 <= self.prepull_high_water <= 100, "FleetConfig.prepull_high_water",
               "must be a percentage, 1 to 100 (of a node's image filesystem)")
        _check(self.prepull_images_per_pod >= 1, "FleetConfig.prepull_images_per_pod", "must be >= 1")


def _seconds(s: float) -> str:
    return f"{s:g}s"


def _pod_overrides(t: TemplateSpec) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": t.resources.cpu, "memory": t.resources.memory}}
    limits = {k: v for k, v in (("cpu", t.resources.cpu_limit), ("memory", t.resources.memory_limit)) if v}
    if limits:
        resources["limits"] = limits
    out: dict[str, Any] = {"resources": resources, "command": list(t.keepalive_command),
                           "imagePullPolicy": t.image_pull_policy, "colocate": t.colocate_replicas}
    if t.runtime_class:
        out["runtimeClassName"] = t.runtime_class
    if t.node_selector:
        out["nodeSelector"] = dict(t.node_selector)
    if t.image_pull_secret:
        out["imagePullSecret"] = t.image_pull_secret
    if t.extra_pod_spec:
        out["extraPodSpec"] = dict(t.extra_pod_spec)
    if t.extra_template_spec:
        out["extraTemplateSpec"] = dict(t.extra_template_spec)
    return out


def to_engine(c: FleetConfig, recycle: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fleet configuration serve reads (examples/fleet.yaml's fields) of
    c; ``recycle`` the recycling block, when a run asks for it. Graces the
    reference leaves unset are ready_timeout here, as there."""
    ff = c.fail_fast
    out: dict[str, Any] = {
        "clusters": [_cluster(i, k) for i, k in enumerate(c.clusters)],
        "placement": c.placement,
        "maxConcurrent": c.max_concurrent,
        "maxWarmPoolSize": c.max_warmpool_size,
        "warmPerTask": c.warm_per_task,
        "windowSize": c.window_size or 0,
        "readyTimeout": _seconds(c.ready_timeout),
        "warmCreateBudget": c.warm_create_budget,
        "overcommitFactor": c.overcommit_factor,
        "maxLiveSandboxes": c.max_live_sandboxes or 0,
        "breakerInterval": _seconds(c.breaker_poll_s),
        "breakerPolls": c.breaker_trip_polls,
        "failFast": ff.enabled,
        "claimGrace": _seconds(ff.grace_s if ff.grace_s is not None else c.ready_timeout),
        "unschedulableGrace": _seconds(ff.unschedulable_grace_s if ff.unschedulable_grace_s is not None else c.ready_timeout),
        "template": _pod_overrides(c.template),
        "labels": dict(c.labels),
    }
    disk = {k: v for k, v in (("avgImageGB", c.avg_image_gb), ("nodeEphemeralGB", c.node_ephemeral_gb),
                              ("nodes", c.cluster_nodes)) if v}
    if disk:
        out["disk"] = {**disk, "headroom": c.disk_headroom}
    if recycle:
        out["recycle"] = recycle
    return out


def _cluster(i: int, k: ClusterConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"name": k.name, "namespace": k.namespace, "weight": k.weight}
    for key, value in (("kubeconfig", k.kubeconfig), ("context", k.context), ("nodeSelector", k.node_selector),
                       ("runtimeClassName", k.runtime_class), ("imagePullSecret", k.image_pull_secret),
                       ("maxReplicas", k.max_replicas)):
        if value:
            out[key] = value
    if k.in_cluster:
        out["inCluster"] = True
    return out


# The engine's configuration fields (as its errors name them) and the
# reference's names for them, so that a value the engine refuses is named
# as the trainer wrote it.
_ENGINE_NAMES = {
    "placement": "FleetConfig.placement", "maxConcurrent": "FleetConfig.max_concurrent",
    "maxWarmPoolSize": "FleetConfig.max_warmpool_size", "warmPerTask": "FleetConfig.warm_per_task",
    "windowSize": "FleetConfig.window_size", "readyTimeout": "FleetConfig.ready_timeout",
    "warmCreateBudget": "FleetConfig.warm_create_budget", "overcommitFactor": "FleetConfig.overcommit_factor",
    "maxLiveSandboxes": "FleetConfig.max_live_sandboxes", "breakerInterval": "FleetConfig.breaker_poll_s",
    "breakerPolls": "FleetConfig.breaker_trip_polls", "labels": "FleetConfig.labels",
    "failFast": "FailFastPolicy.enabled", "claimGrace": "FailFastPolicy.grace_s",
    "unschedulableGrace": "FailFastPolicy.unschedulable_grace_s",
    "disk.avgImageGB": "FleetConfig.avg_image_gb", "disk.nodeEphemeralGB": "FleetConfig.node_ephemeral_gb",
    "disk.headroom": "FleetConfig.disk_headroom", "disk.nodes": "FleetConfig.cluster_nodes",
    "template.resources.requests.cpu": "ResourceSpec.cpu", "template.resources.requests.memory": "ResourceSpec.memory",
    "template.resources.limits.cpu": "ResourceSpec.cpu_limit", "template.resources.limits.memory": "ResourceSpec.memory_limit",
    "template.command": "TemplateSpec.keepalive_command", "template.runtimeClassName": "TemplateSpec.runtime_class",
    "template.nodeSelector": "TemplateSpec.node_selector", "template.imagePullSecret": "TemplateSpec.image_pull_secret",
    "template.imagePullPolicy": "TemplateSpec.image_pull_policy", "template.colocate": "TemplateSpec.colocate_replicas",
    "template.extraPodSpec": "TemplateSpec.extra_pod_spec", "template.extraTemplateSpec": "TemplateSpec.extra_template_spec",
    "recycle.maxReuses": "run(max_reuses=)", "recycle.resetTimeout": "run(reset_timeout=)",
    "recycle.workdir": "GitRestoreReset.testbed",
}
_CLUSTER_NAMES = {"kubeconfig": "kubeconfig", "context": "context", "namespace": "namespace", "nodeSelector": "node_selector",
                  "runtimeClassName": "runtime_class", "imagePullSecret": "image_pull_secret", "weight": "weight",
                  "maxReplicas": "max_replicas", "inCluster": "in_cluster", "name": "name"}


def in_reference_terms(message: str) -> str:
    """message with the engine's field names as the reference spells them
    (``maxWarmPoolSize:`` -> ``FleetConfig.max_warmpool_size:``)."""
    message = re.sub(r"clusters\[(\d+)\]\.(\w+)",
                     lambda m: f"FleetConfig.clusters[{m.group(1)}].{_CLUSTER_NAMES.get(m.group(2), m.group(2))}", message)
    for engine in sorted(_ENGINE_NAMES, key=len, reverse=True):
        message = re.sub(rf"(?<![\w.]){re.escape(engine)}(?=:)", _ENGINE_NAMES[engine], message)
    return message
