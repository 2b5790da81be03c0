"""agent-sandbox-rl's capacity planner: what a node pool holds
(``probe_capacity``), the plan that runs a benchmark of N images soonest
on it (``plan_benchmark``), and its summary (``render_plan``). The probe
and the plan are the engine's (``kubectl sandbox-fleet plan --probe``):
the nodes' allocatable CPU, pods and image disk, what their caches hold,
and a stated model of pulls, tasks and claims; the reference's field
names and summary are kept."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from typing import Any

from .._start import find_plugin
from ..errors import FleetError
from .config import ClusterConfig, in_reference_terms

GiB = 1 << 30


class Cluster:
    """A cluster of a ClusterConfig as the planner reads it. ``core_api`` is
    the cluster itself: this package reads clusters through the kubectl
    plugin (its kubeconfig and context), not through the kubernetes
    Python client."""

    def __init__(self, config: ClusterConfig | None = None, *, plugin: str | None = None):
        self.config = config or ClusterConfig()
        self.name, self.namespace = self.config.name, self.config.namespace
        self.plugin = plugin
        self.core_api = self


@dataclasses.dataclass
class ClusterCapacity:
    """A node pool's capacity: its nodes, allocatable CPU, image disk (GiB)
    and pods in all."""

    pool: str
    nodes: int
    machine_types: list[str]
    cpu_milli_total: int
    disk_gb_total: float
    pods_total: int
    _cluster: Cluster = dataclasses.field(repr=False, compare=False, default_factory=Cluster)
    _selector: str | None = dataclasses.field(repr=False, compare=False, default=None)

    @property
    def cpu_milli_per_node(self) -> int:
        return self.cpu_milli_total // max(1, self.nodes)

    @property
    def disk_gb_per_node(self) -> float:
        return self.disk_gb_total / max(1, self.nodes)

    @property
    def pods_per_node(self) -> int:
        return self.pods_total // max(1, self.nodes)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}
        d.update(cpu_milli_per_node=self.cpu_milli_per_node, disk_gb_per_node=round(self.disk_gb_per_node, 1),
                 pods_per_node=self.pods_per_node, vcpu_total=round(self.cpu_milli_total / 1000, 1))
        return d


@dataclasses.dataclass
class BenchmarkPlan:
    """The settings that run the benchmark soonest, by the engine's model,
    and why."""

    strategy: str
    max_concurrent: int
    window_size: int | None
    warm_per_task: bool
    colocate: bool
    replicas_per_image: int
    total_warm_pods: int
    resident_disk_per_node_gb: float
    usable_disk_per_node_gb: float
    bottleneck: str
    n_images: int
    tasks_per_image: int
    n_tasks: int
    rationale: list[str]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _selector_map(selector: str | None) -> dict[str, str]:
    out = {}
    for part in (selector or "").split(","):
        if part.strip():
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"node_selector {selector!r}: give key=value[,key=value]")
            out[key.strip()] = value.strip()
    return out


def _probe(cluster: Cluster, selector: str | None, rows: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
    """The engine's recommendation for rows on cluster's nodes that selector
    picks (plan --probe -o json)."""
    c = cluster.config
    target: dict[str, Any] = {"name": c.name, "namespace": c.namespace}
    for key, value in (("kubeconfig", c.kubeconfig), ("context", c.context)):
        if value:
            target[key] = value
    template = {**config.pop("template", {}), "nodeSelector": _selector_map(selector)}
    full = {"apiVersion": "sandbox-fleet.io/v1alpha1", "kind": "FleetConfig", "clusters": [target], "template": template, **config}
    with tempfile.TemporaryDirectory(prefix="sandbox-fleet-probe-") as d:
        path = os.path.join(d, "fleet.json")
        with open(path, "w") as f:
            json.dump(full, f)
        argv = [find_plugin(cluster.plugin), "plan", "--probe", "-f", path, "--tasks", "-", "-o", "json"]
        p = subprocess.run(argv, input="".join(json.dumps(r) + "\n" for r in rows), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise FleetError(in_reference_terms(f"plan --probe: {p.stderr.strip()}"))
    recs = json.loads(p.stdout)
    if not recs:
        raise FleetError(f"plan --probe found nothing to plan on cluster {c.name}")
    rec: dict[str, Any] = recs[0]
    return rec


def probe_capacity(core_api: Cluster, node_selector: str | None = None, **_: Any) -> ClusterCapacity:
    """The capacity of the nodes node_selector (``key=value``) picks in the
    cluster (``Cluster(...).core_api``)."""
    rec = _probe(core_api, node_selector, [{"id": "probe", "image": "sandbox-fleet.invalid/probe:capacity"}], {})
    t = rec.get("totals") or {}
    return ClusterCapacity(pool=node_selector or "(all nodes)", nodes=int(t.get("nodes", 0)), machine_types=[],
                           cpu_milli_total=int(t.get("cpuMilli", 0)), disk_gb_total=int(t.get("diskBytes", 0)) / GiB,
                           pods_total=int(t.get("pods", 0)), _cluster=core_api, _selector=node_selector)


def plan_benchmark(cap: ClusterCapacity, n_images: int, tasks_per_image: int = 1, *, avg_image_gb: float = 10.0,
                   cpu_request_milli: int = 250, disk_headroom: float = 0.25, max_pool: int = 64) -> BenchmarkPlan:
    """The plan that runs n_images images (tasks_per_image tasks each)
    soonest on cap's nodes, by the engine's model: naive when every image
    fits the nodes' disk, a disk-bounded window otherwise; warm_per_task
    and colocate for RL shapes."""
    if n_images < 1 or tasks_per_image < 1:
        raise ValueError("n_images and tasks_per_image must be >= 1")
    if cpu_request_milli < 1:
        raise ValueError("cpu_request_milli must be >= 1")
    if max_pool < 1:
        raise ValueError("max_pool must be >= 1")
    if avg_image_gb <= 0:
        raise ValueError("avg_image_gb must be > 0")
    if not 0.0 <= disk_headroom < 1.0:
        raise ValueError("disk_headroom must be in [0, 1)")
    rows = [{"id": f"i{i}-t{j}", "image": f"sandbox-fleet.invalid/benchmark/image-{i}:latest"}
            for i in range(n_images) for j in range(tasks_per_image)]
    nodes = max(1, cap.nodes)
    config = {"template": {"resources": {"requests": {"cpu": f"{cpu_request_milli}m"}}}, "maxWarmPoolSize": max_pool,
              "disk": {"avgImageGB": avg_image_gb, "nodeEphemeralGB": cap.disk_gb_per_node, "headroom": disk_headroom,
                       "nodes": nodes}}
    rec = _probe(cap._cluster, cap._selector, rows, config)
    c, plan, chosen = rec.get("config") or {}, rec.get("plan") or {}, rec.get("chosen") or {}
    strategy = str(c.get("strategy", "naive"))
    window = None if strategy in ("naive", "none") else int(plan.get("pipelinedWindow" if strategy == "pipelined" else "slidingWindow") or 0) or None
    replicas = max((int(p.get("replicas", 0)) for p in plan.get("pools") or []), default=1)
    return BenchmarkPlan(
        strategy=strategy, max_concurrent=int(c.get("maxConcurrent", 1)), window_size=window,
        warm_per_task=bool(c.get("warmPerTask")), colocate=bool(c.get("colocate")), replicas_per_image=replicas,
        total_warm_pods=int(chosen.get("peak", 0)),
        resident_disk_per_node_gb=float((plan.get("peak") or {}).get("diskGB", 0.0)) / nodes,
        usable_disk_per_node_gb=cap.disk_gb_per_node * (1 - disk_headroom), bottleneck=str(chosen.get("bottleneck", "")),
        n_images=n_images, tasks_per_image=tasks_per_image, n_tasks=n_images * tasks_per_image,
        rationale=[str(r) for r in rec.get("reasons") or []])


def render_plan(cap: ClusterCapacity, plan: BenchmarkPlan) -> str:
    """The probed capacity and the recommended plan, as the reference prints them."""
    win = plan.window_size if plan.window_size is not None else "all (none)"
    lines = [
        "Cluster capacity",
        f"  pool          : {cap.pool}",
        f"  nodes         : {cap.nodes}  ({', '.join(cap.machine_types) or 'n/a'})",
        f"  CPU           : {cap.cpu_milli_total / 1000:.0f} vCPU (~{cap.cpu_milli_per_node / 1000:.1f}/node)",
        f"  disk (alloc)  : {cap.disk_gb_total:.0f} GiB (~{cap.disk_gb_per_node:.0f}/node)",
        f"  pods          : {cap.pods_total} (~{cap.pods_per_node}/node)",
        "",
        f"Recommended plan for {plan.n_images} images x {plan.tasks_per_image} = {plan.n_tasks} tasks",
        f"  strategy          : {plan.strategy}",
        f"  max_concurrent    : {plan.max_concurrent}",
        f"  window_size       : {win}",
        f"  replicas/image    : {plan.replicas_per_image}",
        f"  warm_per_task     : {plan.warm_per_task}",
        f"  colocate_replicas : {plan.colocate}",
        f"  warm pods         : {plan.total_warm_pods} ({'peak' if plan.strategy != 'naive' else 'all'})",
        f"  resident disk/node: {plan.resident_disk_per_node_gb:.0f} / {plan.usable_disk_per_node_gb:.0f} GiB usable",
        f"  bottleneck        : {plan.bottleneck}",
        "",
        "Why:",
    ]
    lines += [f"  - {r}" for r in plan.rationale]
    return "\n".join(lines)
