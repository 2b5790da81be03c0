"""agent-sandbox-rl's Python API on sandbox-fleet: switching is the import.

    from sandbox_fleet.rl import SandboxFleet, FleetConfig, ClusterConfig

    fleet = SandboxFleet(FleetConfig(clusters=[ClusterConfig(name="rl", namespace="rl")], max_concurrent=8))
    fleet.load_tasks([{"id": "t1", "image": "busybox:1.36"}])
    results = fleet.run(lambda task, h: h.exec("echo hi"), strategy="sliding")

The names, signatures, defaults and results are the reference's (a
process_fn gets a ``Task``; ``run`` returns values and exception objects;
``exec`` returns the output as text). The fleet runs on a session the
client starts itself (``kubectl-sandbox_fleet serve`` as the trainer's
child; see sandbox_fleet.start). What differs, and the native API's
equivalents, are in docs/migrating.md."""

from .._fleet import LookaheadWarmer
from ..errors import FleetError, SandboxLostError, SandboxStartError
from .capacity import BenchmarkPlan, Cluster, ClusterCapacity, plan_benchmark, probe_capacity, render_plan
from .config import (ClusterConfig, FailFastPolicy, FleetConfig, ObservabilityConfig, ResourceSpec, TemplateSpec)
from .fleet import (STRATEGIES, AsyncSandboxFleet, CapacityError, FleetOvercommitError, FleetPlan, GitRestoreReset, NoClusterAvailableError,
                    PlanEntry, PreflightError, RunReport, SandboxFleet, SandboxHandle, SandboxSession, determinism_canary, reap,
                    reap_orphans)
from .metrics import serve_metrics
from .tasks import (SWEBENCH_PROBE, ImageListSource, JsonlSource, ListSource, SweBenchSource, Task, TaskSource, load_image_list,
                    make_rewriter, rewrite_image, swebench_probe, to_tasks)

__all__ = [
    "AsyncSandboxFleet", "BenchmarkPlan", "CapacityError", "Cluster", "ClusterCapacity", "ClusterConfig", "FailFastPolicy", "FleetConfig", "FleetError", "FleetOvercommitError",
    "FleetPlan", "GitRestoreReset", "ImageListSource", "JsonlSource", "ListSource", "LookaheadWarmer", "NoClusterAvailableError",
    "ObservabilityConfig", "PlanEntry", "PreflightError", "ResourceSpec", "RunReport", "STRATEGIES", "SWEBENCH_PROBE",
    "SandboxFleet", "SandboxHandle", "SandboxLostError", "SandboxSession", "SandboxStartError", "SweBenchSource", "Task",
    "TaskSource", "TemplateSpec", "determinism_canary", "load_image_list", "make_rewriter", "plan_benchmark", "probe_capacity", "reap", "reap_orphans",
    "render_plan", "rewrite_image", "serve_metrics", "swebench_probe", "to_tasks",
]
