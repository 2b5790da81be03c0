"""agent-sandbox-rl's SandboxFleet and AsyncSandboxFleet, over a session this
client starts itself (``sandbox_fleet.start``: serve as the trainer's
child). The session is opened when first needed — ``setup()``, an
acquire, a run — with the FleetConfig translated into the engine's
configuration, and closed by ``teardown()``, ``with`` exit, a run that
does not keep its pools warm, or the trainer's end."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import _fleet, testing
from . import metrics
from .._handle import AsyncHandle, Handle
from .._shell import Shell
from .._start import find_plugin
from ..errors import FleetError, PluginError
from ..runner import RunReport as NativeReport
from ..runner import RunResult
from .config import ClusterConfig, FleetConfig, in_reference_terms, to_engine
from .tasks import Task, to_tasks


logger = logging.getLogger("sandbox_fleet.rl")

# The reference's strategies, refused as it refuses them before a session
# plans the run (which checks them again, as the engine defines them).
STRATEGIES = ("none", "naive", "sliding", "pipelined")


class PreflightError(FleetError):
    """A required preflight check failed (cluster, CRDs, controller, namespace)."""


class CapacityError(FleetError):
    """Requested provisioning exceeds available or declared capacity."""


class NoClusterAvailableError(FleetError):
    """Placement could not select a cluster for a task."""


class FleetOvercommitError(FleetError):
    """The runaway breaker tripped: live sandboxes stayed above the safe
    ceiling, and the fleet was torn down."""


class SandboxSession:
    """One long-lived shell per sandbox: ``run(command)`` returns the
    combined output, as a one-shot exec does, without a new exec each."""

    def __init__(self, shell: Shell):
        self._shell = shell
        self.is_open = True

    def run(self, command: str | list[str], timeout: float | None = None) -> str:
        """Runs command in the shell and returns stdout and stderr as
        written; past timeout it is stopped, the session closed and
        TimeoutError raised (the reference's behaviour)."""
        r = self._shell.run(_as_script(command), timeout=timeout, merge_stderr=True)
        if r.timed_out:
            self.close()
            raise TimeoutError(f"session.run timed out after {timeout}s on {self._shell.handle.pod}")
        return r.stdout.decode("utf-8", "replace")

    def close(self) -> None:
        if self.is_open:
            self.is_open = False
            self._shell.close()


def _as_script(command: str | list[str]) -> str:
    if isinstance(command, str):
        return command
    if len(command) >= 3 and command[0] in ("bash", "sh") and command[1] == "-lc":
        return command[2]
    import shlex

    return shlex.join(command)


@dataclass
class SandboxHandle:
    """A sandbox claimed for one task: its names, ``exec`` returning the
    combined output as text, ``endpoint``, sessions, liveness."""

    task: Task
    cluster_name: str
    claim_name: str
    sandbox_id: str
    pod_name: str
    hostname: str
    pod_ip: str | None = None
    target_container: str | None = None
    handle: Handle | None = field(default=None, repr=False)
    _session: SandboxSession | None = field(default=None, repr=False)
    _session_container: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, task: Task, h: Handle) -> "SandboxHandle":
        return cls(task=task, cluster_name=h.cluster, claim_name=h.claim, sandbox_id=h.sandbox, pod_name=h.pod,
                   hostname=h.hostname, pod_ip=h.pod_ip or None, handle=h)

    def _native(self) -> Handle:
        assert self.handle is not None, "a handle made by SandboxFleet.acquire or run"
        return self.handle

    def exec(self, command: str | list[str], timeout: float | None = None, container: str | None = None) -> str:
        """Runs command in the sandbox and returns stdout and stderr as they
        were written, as text: a string runs through ``bash -lc``, a list is
        the argv. A non-zero exit is no error (read it from the output, or
        use ``.handle.exec`` for the exit code); past ``timeout`` seconds
        the command is killed and TimeoutError raised; a lost sandbox
        raises SandboxLostError."""
        container = container or self.target_container
        if self._session is not None and self._session.is_open and container == self._session_container:
            return self._session.run(command, timeout=timeout)
        argv = ["bash", "-lc", command] if isinstance(command, str) else list(command)
        r = self._native().exec(["sh", "-c", 'exec "$@" 2>&1', "sh", *argv], timeout=timeout,
                                container=container)
        if r.timed_out:
            raise TimeoutError(f"exec timed out after {timeout}s on {self.pod_name}")
        return r.stdout.decode("utf-8", "replace")

    def open_session(self, container: str | None = None) -> SandboxSession:
        """Opens (once) a long-lived shell in container (target_container,
        else the runtime's) that later ``exec`` calls in that container
        use; one open in another container is closed first."""
        container = container or self.target_container
        if self._session is not None and self._session.is_open and container != self._session_container:
            self._session.close()
        if self._session is None or not self._session.is_open:
            name = f"session-{self.claim_name}" + (f"-{container}" if container else "")
            self._session = SandboxSession(self._native().shell(name, container=container))
            self._session_container = container
        return self._session

    def close_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def endpoint(self, port: int = 8888) -> str:
        return self._native().endpoint(port)

    def is_alive(self) -> bool:
        return self._native().is_alive()

    def release(self) -> None:
        self.close_session()
        self._native().fleet.release(self._native())


@dataclass
class PlanEntry:
    """One image's pool in the plan."""

    image: str
    tasks: int
    replicas: int
    cluster: str = ""


class FleetPlan:
    """The plan of the loaded tasks, by the engine's planner."""

    def __init__(self, entries: list[PlanEntry], windows: list[list[str]], warnings: list[str], strategy: str):
        self.entries, self.windows, self.warnings, self.strategy = entries, windows, warnings, strategy

    def for_image(self, image: str) -> PlanEntry | None:
        return next((e for e in self.entries if e.image == image), None)

    @property
    def total_replicas(self) -> int:
        return sum(e.replicas for e in self.entries)

    def by_cluster(self) -> dict[str, list[PlanEntry]]:
        out: dict[str, list[PlanEntry]] = {}
        for e in self.entries:
            out.setdefault(e.cluster, []).append(e)
        return out


@dataclass
class RunReport:
    """A run's figures with the reference's keys: per-phase count, total
    and max seconds, claims, tasks ok and failed, warm replicas (from the
    plan: the total and the most warm at once)."""

    strategy: str
    total_s: float = 0.0
    phases: dict[str, list[float]] = field(default_factory=dict)
    claims: int = 0
    tasks_ok: int = 0
    tasks_err: int = 0
    warm_total: int = 0
    peak_warm: int = 0
    environment: dict[str, Any] = field(default_factory=dict)

    _ORDER = ("preflight", "plan", "prepull", "create_warmpool", "wait_pool_ready", "prefetch", "claim", "process", "reset",
              "quarantine", "rotate", "release", "teardown")

    @classmethod
    def of(cls, native: NativeReport, plan: FleetPlan | None) -> "RunReport":
        d = native.to_dict()
        phases = {p["name"]: [p["count"], p["totalSeconds"], p["maxSeconds"]] for p in d["phases"]}
        warm_total = plan.total_replicas if plan else 0
        peak = max((sum(e.replicas for e in plan.entries if e.image in w) for w in plan.windows), default=0) if plan else 0
        return cls(d["strategy"], d["wallSeconds"], phases, d["claims"], d["tasksOk"], d["tasksErr"], warm_total, peak)

    def _ordered(self) -> list[tuple[str, list[float]]]:
        names = list(self._ORDER) + [p for p in self.phases if p not in self._ORDER]
        return [(p, self.phases[p]) for p in names if p in self.phases]

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "total_s": round(self.total_s, 2),
                "phases": {p: {"count": int(c[0]), "total_s": round(c[1], 2), "max_s": round(c[2], 2)} for p, c in self.phases.items()},
                "claims": self.claims, "tasks_ok": self.tasks_ok, "tasks_err": self.tasks_err,
                "warm_replicas_total": self.warm_total, "warm_replicas_peak": self.peak_warm, "environment": self.environment}

    def summary(self) -> str:
        lines = [f"── Run report (strategy={self.strategy}) ──"]
        for name, (count, total, mx) in self._ordered():
            lines.append(f"  {name:<18} {total:8.2f}s  (n={int(count)}, max={mx:.2f}s)")
        lines.append("  " + "-" * 40)
        lines.append(f"  {'TOTAL':<18} {self.total_s:8.2f}s")
        lines.append(f"  claims={self.claims}  tasks={self.tasks_ok}ok/{self.tasks_err}err"
                     f"  warm_replicas total={self.warm_total} peak={self.peak_warm}")
        return "\n".join(lines)


def _recycling(reset: Any, max_reuses: int, reset_timeout: float, use_session: bool) -> dict[str, Any]:
    """The engine's recycle block of run()'s recycling keywords; ``reset``
    is a GitRestoreReset (its testbed, check_env)."""
    out: dict[str, Any] = {"enabled": True, "maxReuses": max_reuses, "resetTimeout": f"{reset_timeout:g}s", "reset": "git"}
    if reset is not None:
        out["workdir"] = getattr(reset, "testbed", "/testbed")
        out["checkEnv"] = bool(getattr(reset, "check_env", False))
    return {"recycle": out, "session": use_session}


@dataclass
class GitRestoreReset:
    """The reset of a recycled sandbox: /testbed back to its first commit,
    cleaned, processes stopped, /tmp emptied, then verified (serve's
    ``recycle.reset: git``); ``check_env`` also requires the environment
    as at first use."""

    testbed: str = "/testbed"
    check_env: bool = False
    check_config: bool = False


class SandboxFleet:
    """agent-sandbox-rl's SandboxFleet over a session this client starts."""

    def __init__(self, config: FleetConfig | None = None, registry: Any = None, *, plugin: str | None = None):
        if registry is not None:
            raise ValueError("registry: the session builds its clients from config.clusters; leave registry None")
        self.config = config or FleetConfig()
        self.tasks: list[Task] = []
        self.report: RunReport | None = None
        self.plan_: FleetPlan | None = None
        self._plugin = plugin
        self._lock = threading.RLock()
        self._native: _fleet.SandboxFleet | None = None
        self._recycling: dict[str, Any] | None = None
        self._given: set[str] = set()
        self._by_id: dict[str, Task] = {}
        self._handles: list[SandboxHandle] = []

    # The session.

    def _start(self, engine: dict[str, Any]) -> _fleet.SandboxFleet:
        """A session of engine's configuration (FakeFleet's is in process)."""
        args = ["--metrics-addr", "127.0.0.1:0"] if self.config.observability.enable_metrics else []
        try:
            native = _fleet.start(engine, plugin=self._plugin, args=args)
            metrics.register(self)
            return native
        except PluginError as e:
            message = in_reference_terms(str(e))
            if "preflight" in message.lower():
                raise PreflightError(message) from None
            raise PluginError(message) from None

    def _session(self, recycling: dict[str, Any] | None = None) -> _fleet.SandboxFleet:
        """The session, opened with recycling when asked: a session open
        without it is closed and opened again when nothing is held."""
        with self._lock:
            if self._native is not None and recycling is not None and recycling != self._recycling:
                if self._handles:
                    raise FleetError("run(recycle=True) needs the session opened for recycling, and sandboxes are held: "
                                     "release them (or teardown()) first")
                self._close()
            if self._native is None:
                engine = to_engine(self.config, recycling["recycle"] if recycling else None)
                if recycling:
                    engine["session"] = recycling["session"]
                self._native = self._start(engine)
                self._recycling = recycling
                self._given = set()
            self._give(self.tasks)
            return self._native

    def _give(self, tasks: list[Task]) -> None:
        """Adds the tasks the session does not have yet."""
        assert self._native is not None
        new = [t for t in tasks if t.id not in self._given]
        if new:
            self._native.add_tasks([t.row() for t in new])
            self._given |= {t.id for t in new}

    def _close(self) -> None:
        if self._prepulled:
            try:
                self.prepull_delete()
            except FleetError as e:
                logger.warning("%s; the reaper deletes it with the rest of the run", e)
        native, self._native = self._native, None
        self._prepulled = False
        self._handles.clear()
        if native is not None:
            # A session whose serve died says nothing; its close says why.
            with contextlib.suppress(FleetError):
                self._last_run_id = native.status().run_id
            native.close()

    # Tasks.

    def load_tasks(self, source: Any, *, image_rewrite: Callable[[str], str] | None = None,
                   image_field: str = "image", id_field: str = "id") -> list[Task]:
        """Loads the tasks of source (a TaskSource, Tasks, rows, images):
        they are the fleet's tasks now. ``image_rewrite`` maps each image
        (the original kept in ``metadata['original_image']``)."""
        tasks = to_tasks(source, image_field=image_field, id_field=id_field)
        if image_rewrite is not None:
            out = []
            for t in tasks:
                new = image_rewrite(t.image)
                out.append(t if new == t.image else t.model_copy(update={"image": new, "metadata": {**t.metadata, "original_image": t.image}}))
            tasks = out
        with self._lock:
            self.tasks = tasks
            self._by_id = {t.id: t for t in tasks}
            if self._native is not None:
                self._give(tasks)
        return self.tasks

    def add_tasks(self, source: Any, *, image_field: str = "image", id_field: str = "id") -> list[Task]:
        """Extends the task plan in place (pools of an open session grow)."""
        tasks = to_tasks(source, image_field=image_field, id_field=id_field)
        with self._lock:
            self.tasks = self.tasks + tasks
            self._by_id.update({t.id: t for t in tasks})
            if self._native is not None:
                self._give(tasks)
        return tasks

    def image_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tasks:
            out[t.image] = out.get(t.image, 0) + 1
        return out

    # The lifecycle.

    def preflight(self) -> dict[str, Any]:
        """Checks each cluster, creating nothing (``kubectl sandbox-fleet
        preflight``): it answers and serves the v1beta1 API, the namespace
        exists, the sandboxes' objects may be made there, the runtime class
        and pull secret named exist. Returns each cluster's report; raises
        PreflightError saying what failed."""
        out = {}
        for c in self.config.clusters or [ClusterConfig()]:
            argv = self._verb(c, "preflight", "-o", "json")
            for flag, value in (("--runtime-class", c.runtime_class or self.config.template.runtime_class),
                                ("--image-pull-secret", c.image_pull_secret or self.config.template.image_pull_secret)):
                if value:
                    argv += [flag, value]
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                raise PreflightError(f"cluster {c.name}: {(p.stderr or p.stdout).strip()}")
            out[c.name] = json.loads(p.stdout) if p.stdout.strip().startswith(("{", "[")) else p.stdout
        return out

    def _verb(self, c: ClusterConfig, verb: str, *args: str) -> list[str]:
        """The plugin's verb on cluster c."""
        argv = [find_plugin(self._plugin), verb, *args, "-n", c.namespace]
        for flag, value in (("--kubeconfig", c.kubeconfig), ("--context", c.context)):
            if value:
                argv += [flag, value]
        return argv

    def prepull(self, wait: bool = True) -> bool:
        """Has the nodes pull the plan's images before any pool is warmed:
        a PrepullJob per cluster (``kubectl sandbox-fleet prepull``) that
        is the session's, so teardown — or the cluster's reaper, once a
        killed trainer's heartbeat expires — deletes it; the images stay
        on the nodes unless ``prepull_delete_when_done``. The nodes'
        asrl-prepull-agent pulls, through the runtime with the node's own
        credentials and mirrors; nodes without it pull as sandboxes land
        (a warning, as the reference's DaemonSet finding no node). With
        wait, until every node with an agent is done, up to
        ready_timeout; returns whether every one got every image."""
        cfg = self.config
        if cfg.prepull_images_per_pod != 25 or cfg.prepull_drop_caches:
            logger.warning("prepull: prepull_images_per_pod and prepull_drop_caches change nothing here: "
                           "the node agent pulls through the runtime, not through Pods")
        images = sorted({e.image for e in (self.plan_ or self.plan()).entries})
        run_id = self._session().status().run_id
        self._prepulled = True
        done = True
        for c in cfg.clusters or [ClusterConfig()]:
            argv = self._verb(c, "prepull", "--tasks", "-", "--run-id", run_id, "--parallelism", str(cfg.prepull_max_parallel),
                              "--prepull-high-water", str(cfg.prepull_high_water))
            selector = c.node_selector or cfg.template.node_selector
            if selector:
                argv += ["-l", ",".join(f"{k}={v}" for k, v in sorted(selector.items()))]
            if cfg.prepull_delete_when_done:
                argv.append("--delete-when-done")
            if wait:
                argv += ["--wait", "--timeout", f"{cfg.ready_timeout}s", "-o", "json"]
            p = subprocess.run(argv, input="".join(i + "\n" for i in images), capture_output=True, text=True,
                               timeout=cfg.ready_timeout + 120)
            said = p.stderr.strip().splitlines()
            for line in said:
                if line.startswith("Warning:"):
                    logger.warning("prepull on cluster %s: %s", c.name, line.removeprefix("Warning:").strip())
            if p.returncode == 0:
                continue
            if "nothing would pull" in p.stderr:
                logger.warning("prepull on cluster %s: no node runs asrl-prepull-agent; sandboxes pull their images as they land", c.name)
            elif wait and p.stdout.strip().startswith("{"):
                # Timed out, or a node could not pull an image: the job goes
                # on, and the run too, as the reference's pre-pull.
                logger.error("prepull on cluster %s: %s", c.name, said[-1] if said else f"exit {p.returncode}")
                done = False
            else:
                raise FleetError(in_reference_terms(f"prepull on cluster {c.name}: {p.stderr.strip() or p.stdout.strip()}"))
        return done

    def prepull_delete(self) -> None:
        """Deletes the session's PrepullJobs now; the images the nodes
        pulled stay (unless prepull_delete_when_done)."""
        native = self._native
        if native is None or not self._prepulled:
            return
        run_id = native.status().run_id
        for c in self.config.clusters or [ClusterConfig()]:
            p = subprocess.run(self._verb(c, "prepull", "--delete", "--run-id", run_id), capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                raise FleetError(f"prepull_delete on cluster {c.name}: {p.stderr.strip()}")
        self._prepulled = False

    def plan(self, strategy: str = "naive") -> FleetPlan:
        """The plan of the loaded tasks by the engine's planner (offline):
        each image's pool depth and the windows strategy warms."""
        if not self.tasks:
            raise FleetError("no tasks loaded: call load_tasks first")
        with tempfile.TemporaryDirectory(prefix="sandbox-fleet-plan-") as d:
            path = os.path.join(d, "fleet.json")
            with open(path, "w") as f:
                json.dump({"apiVersion": "sandbox-fleet.io/v1alpha1", "kind": "FleetConfig", **to_engine(self.config)}, f)
            rows = "".join(json.dumps({"id": t.id, "image": t.image}) + "\n" for t in self.tasks)
            argv = [find_plugin(self._plugin), "plan", "--offline", "-f", path, "--tasks", "-", "--strategy", strategy, "-o", "json"]
            p = subprocess.run(argv, input=rows.encode(), capture_output=True, timeout=120)
        if p.returncode != 0:
            raise FleetError(in_reference_terms(f"plan: {p.stderr.decode(errors='replace').strip()}"))
        out = json.loads(p.stdout)
        self.plan_ = FleetPlan([PlanEntry(x["image"], int(x["tasks"]), int(x["replicas"])) for x in out.get("pools") or []],
                               [list(w["images"]) for w in out.get("windows") or []], list(out.get("warnings") or []),
                               out.get("strategy", strategy))
        return self.plan_

    def start_warmpools(self, wait: bool = True, create_budget: int | None = None) -> None:
        """Warms every image's pool; with wait, until they are Ready."""
        native = self._session()
        images = list(self.image_counts())
        if images:
            native.lookahead(images)
            if wait:
                native.wait_pools_ready(timeout=self.config.ready_timeout, images=images)

    def lookahead(self, tasks: list[Task | str]) -> list[Any]:
        """Starts warming the pools of these tasks (Tasks, ids or images)
        and returns at once (LookaheadWarmer calls it for the next steps)."""
        new = [t for t in tasks if isinstance(t, Task) and t.id not in self._by_id]
        if new:
            self.add_tasks(new)
        return self._session().lookahead([t.id if isinstance(t, Task) else t for t in tasks])

    def wait_pools_ready(self, timeout: float | None = None) -> bool:
        """Waits up to timeout (ready_timeout when None) for the pools asked
        for; never raises for not ready."""
        return bool(self._session().wait_pools_ready(timeout=timeout or self.config.ready_timeout))

    def setup(self, prepull: bool = False, create_budget: int | None = None) -> "SandboxFleet":
        """preflight → plan → (pre-pull, waiting) → warm pools (and wait
        for them)."""
        self.preflight()
        if self.tasks:
            self.plan()
            if prepull:
                self.prepull(wait=True)
        self.start_warmpools(wait=True, create_budget=create_budget)
        return self

    def teardown(self, delete_namespace: bool = False, verify: bool = False) -> dict[str, Any] | None:
        """Releases every sandbox and deletes everything the session made;
        with verify, returns what is left of it (verify_teardown)."""
        if delete_namespace:
            raise FleetError("teardown(delete_namespace=True): the session never deletes a namespace; delete it yourself")
        with self._lock:
            self._close()
        return self.verify_teardown() if verify else None

    def verify_teardown(self, run_id: str | None = None) -> dict[str, Any]:
        """What is left in the clusters of this fleet's last session (or
        run_id's), read from their API servers: {"run_id", "left":
        ["cluster: Kind/name", ...]}; empty once torn down."""
        rid = run_id or self._last_run_id
        if rid is None:
            return {"run_id": None, "left": []}
        left: list[str] = []
        for c in self.config.clusters or [ClusterConfig()]:
            p = subprocess.run(self._verb(c, "teardown", "--run-id", rid, "--dry-run"), capture_output=True, text=True, timeout=120)
            listed = [line.strip() for line in p.stderr.splitlines() if line.startswith("  ")]
            if p.returncode != 0 and not listed:
                raise FleetError(f"verify_teardown on cluster {c.name}: {p.stderr.strip()}")
            left += listed
        return {"run_id": rid, "left": left}

    def metrics_url(self) -> str | None:
        """Where the open session's serve exports its metrics (loopback),
        for serve_metrics."""
        native = self._native
        serve = native._serve if native is not None else None
        if serve is None:
            return None
        try:
            with open(serve.log_path, "rb") as f:
                return metrics.metrics_url(f.read())
        except OSError:
            return None

    @property
    def run_id(self) -> str | None:
        """The run id labelling everything the open session made."""
        return self._native.status().run_id if self._native is not None else None

    _last_run_id: str | None = None
    _prepulled = False

    def __enter__(self) -> "SandboxFleet":
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    # Claims.

    def _task(self, task: Task | str) -> Task:
        if isinstance(task, Task):
            if task.id not in self._by_id:
                self.add_tasks([task])
            return task
        return self._by_id[task]

    def acquire(self, task: Task | str) -> SandboxHandle:
        """A sandbox of the task's image, claimed from its warm pool."""
        t = self._task(task)
        native = self._session()
        h = SandboxHandle.of(t, native.acquire(t.id, timeout=self.config.ready_timeout))
        with self._lock:
            self._handles.append(h)
        return h

    def acquire_batch(self, tasks: list[Task]) -> list[SandboxHandle]:
        return [self.acquire(t) for t in tasks]

    def handles(self) -> list[SandboxHandle]:
        return list(self._handles)

    def hostnames(self) -> list[str]:
        return [h.hostname for h in self._handles]

    def endpoints(self, port: int = 8888) -> list[str]:
        return [h.endpoint(port) for h in self._handles]

    def release(self, handle: SandboxHandle) -> None:
        """Deletes the sandbox; a handle released already is no error."""
        with self._lock:
            if handle not in self._handles:
                return
            self._handles.remove(handle)
        handle.release()

    def release_all(self) -> None:
        for h in list(self._handles):
            self.release(h)

    # The managed runner.

    def _wrap(self, process_fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(process_fn) or inspect.iscoroutinefunction(getattr(process_fn, "__call__", None)):
            async def run_async(task: dict[str, Any], h: AsyncHandle) -> Any:
                return await process_fn(self._by_id[task["id"]], SandboxHandle.of(self._by_id[task["id"]], h.handle))
            return run_async

        def run(task: dict[str, Any], h: Handle) -> Any:
            return process_fn(self._by_id[task["id"]], SandboxHandle.of(self._by_id[task["id"]], h))
        return run

    def _before_run(self, strategy: str, epochs: int, recycle: bool, reset: Any, max_reuses: int, reset_timeout: float,
                    use_session: bool) -> _fleet.SandboxFleet:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy '{strategy}'; choose from {sorted(STRATEGIES)}")
        if epochs < 1:
            raise ValueError("epochs must be >= 1")
        if not self.tasks:
            raise FleetError("no tasks loaded: call load_tasks first")
        self.plan(strategy)
        return self._session(_recycling(reset, max_reuses, reset_timeout, use_session) if recycle else None)

    def _after_run(self, native_report: NativeReport | None, results: list[Any], epochs: int, keep_warm: bool) -> list[Any]:
        assert native_report is not None, "a run keeps its report"
        self.report = RunReport.of(native_report, self.plan_)
        if not keep_warm:
            self._close()
        return _values(results, epochs)

    def run(self, process_fn: Callable[[Task, SandboxHandle], Any], strategy: str = "naive", concurrency: int | None = None,
            *, epochs: int = 1, keep_warm: bool = False, recycle: bool = False, reset: Any = None, max_reuses: int = 32,
            reset_timeout: float = 5.0, use_session: bool = True, scale_on_hold: bool = True) -> list[Any]:
        """Runs process_fn(task, handle) for every loaded task under strategy
        with up to concurrency (max_concurrent when None) at once; returns
        what each returned, or the exception it raised (or that kept it
        from a sandbox), in task order (a list per epoch when epochs > 1).
        The session is torn down after unless keep_warm. ``recycle`` resets
        and reuses a sandbox per image (reset: a GitRestoreReset;
        max_reuses; reset_timeout in seconds; use_session: one shell per
        sandbox); scale_on_hold is the engine's own doing."""
        native = self._before_run(strategy, epochs, recycle, reset, max_reuses, reset_timeout, use_session)
        try:
            results = native.run(self._wrap(process_fn), strategy, concurrency or self.config.max_concurrent, epochs=epochs,
                                 keep_warm=True, recycle=recycle)
        except BaseException:
            if not keep_warm:
                self._close()
            raise
        return self._after_run(native.report, results, epochs, keep_warm)

    def close(self) -> None:
        """Closes the session (as teardown)."""
        self.teardown()


def _values(results: list[Any], epochs: int) -> list[Any]:
    """The reference's results: each task's value, or its exception."""
    def value(r: RunResult) -> Any:
        return r.value if r.ok else r.error
    if epochs == 1:
        return [value(r) for r in results]
    return [[value(r) for r in rs] for rs in results]


class AsyncSandboxFleet:
    """SandboxFleet for asyncio: the same methods, awaited; run takes a
    coroutine function (awaited on the loop) or a plain one (in a thread),
    each given the task and its SandboxHandle."""

    def __init__(self, config: FleetConfig | None = None, registry: Any = None, *, plugin: str | None = None):
        self._fleet = self._sync(config, registry, plugin)

    @staticmethod
    def _sync(config: FleetConfig | None, registry: Any, plugin: str | None) -> SandboxFleet:
        return SandboxFleet(config, registry, plugin=plugin)

    @property
    def config(self) -> FleetConfig:
        return self._fleet.config

    @property
    def tasks(self) -> list[Task]:
        return self._fleet.tasks

    @property
    def report(self) -> RunReport | None:
        return self._fleet.report

    @property
    def plan_(self) -> FleetPlan | None:
        return self._fleet.plan_

    def load_tasks(self, source: Any, *, image_rewrite: Callable[[str], str] | None = None) -> list[Task]:
        return self._fleet.load_tasks(source, image_rewrite=image_rewrite)

    async def add_tasks(self, source: Any) -> list[Task]:
        return await asyncio.to_thread(self._fleet.add_tasks, source)

    def image_counts(self) -> dict[str, int]:
        return self._fleet.image_counts()

    def handles(self) -> list[SandboxHandle]:
        return self._fleet.handles()

    def hostnames(self) -> list[str]:
        return self._fleet.hostnames()

    def endpoints(self, port: int = 8888) -> list[str]:
        return self._fleet.endpoints(port)

    async def preflight(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._fleet.preflight)

    async def plan(self, strategy: str = "naive") -> FleetPlan:
        return await asyncio.to_thread(self._fleet.plan, strategy)

    async def start_warmpools(self, wait: bool = True, create_budget: int | None = None) -> None:
        await asyncio.to_thread(self._fleet.start_warmpools, wait, create_budget)

    async def lookahead(self, tasks: Iterable[Task | str]) -> list[Any]:
        return await asyncio.to_thread(self._fleet.lookahead, list(tasks))

    async def wait_pools_ready(self, timeout: float | None = None) -> bool:
        return await asyncio.to_thread(self._fleet.wait_pools_ready, timeout)

    async def prepull(self, wait: bool = True) -> bool:
        return await asyncio.to_thread(self._fleet.prepull, wait)

    async def prepull_delete(self) -> None:
        await asyncio.to_thread(self._fleet.prepull_delete)

    async def setup(self, prepull: bool = False) -> "AsyncSandboxFleet":
        await asyncio.to_thread(self._fleet.setup, prepull)
        return self

    async def acquire(self, task: Task | str) -> SandboxHandle:
        return await asyncio.to_thread(self._fleet.acquire, task)

    async def acquire_batch(self, tasks: list[Task]) -> list[SandboxHandle]:
        return list(await asyncio.gather(*(self.acquire(t) for t in tasks)))

    async def release(self, handle: SandboxHandle) -> None:
        await asyncio.to_thread(self._fleet.release, handle)

    async def release_all(self) -> None:
        await asyncio.gather(*(self.release(h) for h in self.handles()))

    async def teardown(self, delete_namespace: bool = False, verify: bool = False) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._fleet.teardown, delete_namespace, verify)

    async def verify_teardown(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._fleet.verify_teardown)

    async def __aenter__(self) -> "AsyncSandboxFleet":
        return await self.setup()

    async def __aexit__(self, *exc: object) -> None:
        await self.teardown()

    def close(self) -> None:
        """Nothing to release: the session's end is teardown()'s."""

    async def run(self, process_fn: Callable[..., Any], strategy: str = "naive", concurrency: int | None = None, *,
                  epochs: int = 1, keep_warm: bool = False, recycle: bool = False, reset: Any = None, max_reuses: int = 32,
                  reset_timeout: float = 5.0, use_session: bool = True, scale_on_hold: bool = True) -> list[Any]:
        f = self._fleet
        native = await asyncio.to_thread(f._before_run, strategy, epochs, recycle, reset, max_reuses, reset_timeout, use_session)
        afleet = _fleet.AsyncSandboxFleet(transport=native._t, client_id=native.client_id)
        try:
            results = await afleet.run(f._wrap(process_fn), strategy, concurrency or f.config.max_concurrent, epochs=epochs,
                                       keep_warm=True, recycle=recycle)
        except BaseException:
            if not keep_warm:
                await asyncio.to_thread(f._close)
            raise
        return await asyncio.to_thread(f._after_run, afleet.report, results, epochs, keep_warm)


def reap(run_id: str | None = None, *, context: str | None = None, kubeconfig: str | None = None, namespace: str | None = None,
         dry_run: bool = False, plugin: str | None = None) -> list[str]:
    """Deletes everything of run run_id (``kubectl sandbox-fleet reap``);
    returns what it deleted (or would, with dry_run)."""
    if not run_id:
        raise ValueError("reap: give the run_id to sweep (reap_orphans sweeps every run not alive)")
    return _reap(["--run-id", run_id], context, kubeconfig, namespace, dry_run, plugin)


def reap_orphans(alive_run_ids: Iterable[str] = (), *, min_age_s: float = 300, context: str | None = None,
                 kubeconfig: str | None = None, namespace: str | None = None, dry_run: bool = False,
                 plugin: str | None = None) -> list[str]:
    """Deletes every run not in alive_run_ids whose heartbeat is older than
    min_age_s (``reap --orphans``); returns what it deleted."""
    alive = ",".join(alive_run_ids)
    args = ["--orphans", "--min-age", f"{min_age_s:g}s"] + (["--alive-run-ids", alive] if alive else [])
    return _reap(args, context, kubeconfig, namespace, dry_run, plugin)


def _reap(args: list[str], context: str | None, kubeconfig: str | None, namespace: str | None, dry_run: bool,
          plugin: str | None) -> list[str]:
    argv = [find_plugin(plugin), "reap", *args]
    for flag, value in (("--context", context), ("--kubeconfig", kubeconfig), ("-n", namespace)):
        if value:
            argv += [flag, value]
    if dry_run:
        argv.append("--dry-run")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise FleetError(f"reap: {p.stderr.strip()}")
    return [line.strip() for line in p.stdout.splitlines() if line.strip()]


def determinism_canary(fleet: SandboxFleet, task: Task, process_fn: Callable[[Task, SandboxHandle], Any], *,
                       reset_timeout: float = 60.0) -> dict[str, Any]:
    """Runs task twice in one recycled sandbox — process_fn, a reset, then
    process_fn again — and says whether the outputs are byte-identical and
    the reset came back clean: {"identical", "reset_clean", "first",
    "second", "outcome"}. Run it before trusting recycling for training."""
    native = fleet._session(_recycling(None, 32, reset_timeout, True))
    t = fleet._task(task)
    h = native.acquire(t.id)
    first = process_fn(t, SandboxHandle.of(t, h))
    outcome = native.release(h, reuse=True)
    h2 = native.acquire(t.id)
    try:
        second = process_fn(t, SandboxHandle.of(t, h2))
        clean = outcome == "reset" and h2.resets == h.resets + 1
    finally:
        native.release(h2)
    return {"identical": first == second, "reset_clean": clean, "first": first, "second": second, "outcome": outcome}


class FakeFleet(SandboxFleet):
    """SandboxFleet with no cluster: the same class over the native
    FakeFleet's session (sandbox_fleet.testing), which plans with the
    plugin's planner where it is installed."""

    def __init__(self, config: FleetConfig | None = None, registry: Any = None, *, plugin: str | None = None,
                 **fake_options: Any):
        super().__init__(config, registry, plugin=plugin)
        self._fake_options = fake_options

    def _start(self, engine: dict[str, Any]) -> _fleet.SandboxFleet:
        recycle = engine.get("recycle") or {}
        plan_args = ["--max-concurrent", str(self.config.max_concurrent), "--max-warmpool-size", str(self.config.max_warmpool_size)]
        if self.config.window_size:
            plan_args += ["--window-size", str(self.config.window_size)]
        if self.config.warm_per_task:
            plan_args.append("--warm-per-task")
        return testing.FakeFleet(recycle=bool(recycle), max_reuses=int(recycle.get("maxReuses", 32)), plan_args=plan_args,
                                 plugin=self._plugin, **self._fake_options)

    def preflight(self) -> dict[str, Any]:
        """Nothing to check: the fake's session is in this process."""
        return {c.name: "ok" for c in self.config.clusters} or {"default": "ok"}

    def plan(self, strategy: str = "naive") -> FleetPlan:
        try:
            return super().plan(strategy)
        except PluginError:
            # No plugin: one window, a replica per task, as the fake runs it.
            counts = self.image_counts()
            self.plan_ = FleetPlan([PlanEntry(i, n, n) for i, n in counts.items()], [list(counts)], [], strategy)
            return self.plan_

    def verify_teardown(self, run_id: str | None = None) -> dict[str, Any]:
        return {"run_id": run_id or self._last_run_id, "left": []}

    def prepull(self, wait: bool = True) -> bool:
        """Nothing to pull: the fake's sandboxes are directories."""
        if self.plan_ is None:
            self.plan()
        return True


class AsyncFakeFleet(AsyncSandboxFleet):
    """AsyncSandboxFleet over FakeFleet."""

    def __init__(self, config: FleetConfig | None = None, registry: Any = None, *, plugin: str | None = None,
                 **fake_options: Any):
        self._fleet = FakeFleet(config, registry, plugin=plugin, **fake_options)
