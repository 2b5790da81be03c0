"""The managed runner: ``fleet.run(fn, strategy=..., concurrency=...,
epochs=..., recycle=...)`` runs ``fn(task, handle)`` once per task (per
epoch) in sandboxes of the session, warming pools by the strategy, as
agent-sandbox-rl's ``SandboxFleet.run`` does and as ``kubectl sandbox-fleet
run`` runs a shell script per task. The session plans (PlanRun: which
images are warm together, in what order); this module follows the plan.

Every task gets a RunResult in its place — ``fn`` raising, or no sandbox to
be had, is captured there with its verdict, never raised — and the run's
figures are kept in a RunReport with the fields of ``run``'s report.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import FailedPreconditionError, FleetError, InfraError

logger = logging.getLogger("sandbox_fleet.run")


# Phases in lifecycle order, as pkg/fleet/report lists them.
_PHASE_ORDER = ["preflight", "plan", "prepull", "create_warmpool", "wait_pool_ready", "prefetch", "claim",
                "record", "process", "reset", "quarantine", "rotate", "release", "teardown"]


@dataclass
class RunResult:
    """One task's outcome in one epoch. ``verdict`` is "ok" (fn returned;
    ``value`` is what it returned), "task" (fn raised; ``error``) or "infra"
    (the infrastructure failed it: no sandbox could be had, or it was lost
    — ``reason`` says why; mask these out of the loss)."""

    task_id: str
    epoch: int
    verdict: str
    value: Any = None
    error: BaseException | None = None
    reason: str = ""
    seconds: float = 0.0
    node: str = ""
    resets: int = 0

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


class RunReport:
    """A run's figures, recorded as it goes (safe from many threads): the
    per-phase counts and times, claims and task outcomes of ``run``'s
    report. ``to_dict()`` has its JSON fields; ``summary()`` its table."""

    def __init__(self, strategy: str):
        self.strategy = strategy
        self._lock = threading.Lock()
        self._phases: dict[str, list[float]] = {}
        self.claims = self.tasks_ok = self.tasks_err = self.tasks_not_run = self.tasks_reused = 0
        self.wall = 0.0

    def phase(self, name: str, seconds: float) -> None:
        with self._lock:
            self._phases.setdefault(name, []).append(seconds)

    def task(self, result: RunResult, ran: bool) -> None:
        with self._lock:
            if result.ok:
                self.tasks_ok += 1
            else:
                self.tasks_err += 1
                self.tasks_not_run += 0 if ran else 1
            self.tasks_reused += 1 if result.resets else 0

    def claim(self) -> None:
        with self._lock:
            self.claims += 1

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            names = [n for n in _PHASE_ORDER if n in self._phases] + sorted(set(self._phases) - set(_PHASE_ORDER))
            phases = [_summarise(n, self._phases[n]) for n in names]
            out = {"strategy": self.strategy, "wallSeconds": self.wall, "phases": phases, "claims": self.claims,
                   "tasksOk": self.tasks_ok, "tasksErr": self.tasks_err, "tasksNotRun": self.tasks_not_run}
            if self.tasks_reused:
                out["tasksReused"] = self.tasks_reused
            return out

    def summary(self) -> str:
        d = self.to_dict()
        rows = [("PHASE", "COUNT", "TOTAL", "P50", "P99", "MAX")]
        rows += [(p["name"], str(p["count"]), f"{p['totalSeconds']:.2f}s", f"{p['p50Seconds']:.2f}s",
                  f"{p['p99Seconds']:.2f}s", f"{p['maxSeconds']:.2f}s") for p in d["phases"]]
        rows.append(("wall", "", f"{d['wallSeconds']:.2f}s", "", "", ""))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines = [f"Run report (strategy {d['strategy']})"]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.append(f"claims {d['claims']}, tasks {d['tasksOk']} ok / {d['tasksErr']} failed ({d['tasksNotRun']} could not run)")
        if self.tasks_reused:
            lines.append(f"recycled: {self.tasks_reused} tasks ran on a reset sandbox")
        return "\n".join(lines)


def _summarise(name: str, values: list[float]) -> dict[str, Any]:
    s = sorted(values)

    def pct(q: float) -> float:
        return s[min(max(math.ceil(q * len(s)), 1), len(s)) - 1]

    return {"name": name, "count": len(s), "totalSeconds": sum(s), "maxSeconds": s[-1],
            "p50Seconds": pct(0.5), "p99Seconds": pct(0.99)}


class _Timed:
    def __init__(self, report: RunReport, name: str):
        self.report, self.name = report, name

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.report.phase(self.name, time.monotonic() - self.start)


@dataclass
class _Plan:
    strategy: str
    concurrency: int
    windows: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    recycle: bool = False
    by_id: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, msg: dict[str, Any]) -> "_Plan":
        tasks = [{**(t.get("metadata") or {}), "id": t["id"], "image": t["image"]} for t in msg.get("tasks", [])]
        windows = [{"images": w.get("images", []), "task_ids": w.get("taskIds", []), "warm": w.get("warm", []),
                    "let_go": w.get("letGo", [])} for w in msg.get("windows", [])]
        return cls(msg["strategy"], int(msg["concurrency"]), windows, tasks, bool(msg.get("recycle")),
                   {t["id"]: t for t in tasks})


def check_args(strategy: str, concurrency: int | None, epochs: int) -> None:
    if epochs < 1:
        raise ValueError(f"epochs is {epochs}: a run has at least one")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency is {concurrency}: at least one task runs at once")


def plan_of(msg: dict[str, Any], recycle: bool) -> _Plan:
    plan = _Plan.of(msg)
    if recycle and not plan.recycle:
        raise FailedPreconditionError("recycle=True needs a session that recycles sandboxes: start serve with --recycle")
    return plan


def shape(results: list[list[RunResult]], epochs: int) -> list[Any]:
    if epochs == 1:
        return results[0]
    return results


def verdict_of(e: BaseException) -> tuple[str, str]:
    if isinstance(e, InfraError):
        return "infra", e.reason or ""
    return "task", ""


def run(fleet: Any, fn: Callable[..., Any], strategy: str, concurrency: int | None, epochs: int, keep_warm: bool,
        recycle: bool) -> list[Any]:
    """SandboxFleet.run's body over a synchronous fleet (the session's or
    FakeFleet)."""
    check_args(strategy, concurrency, epochs)
    report = RunReport(strategy)
    fleet.report = report
    started = time.monotonic()
    with _Timed(report, "plan"):
        plan = plan_of(fleet._plan_run(strategy, concurrency or 0), recycle)
    results: list[list[RunResult]] = []
    try:
        with ThreadPoolExecutor(max_workers=plan.concurrency, thread_name_prefix="sandbox-fleet-run") as pool:
            for epoch in range(epochs):
                got: dict[str, RunResult] = {}
                for window in plan.windows:
                    _warm(fleet, window, report)
                    for r in pool.map(lambda tid: _one(fleet, fn, plan.by_id[tid], epoch, recycle, report),
                                      window["task_ids"]):
                        got[r.task_id] = r
                    if done := window["let_go"]:
                        fleet._cool(done)
                results.append([got[t["id"]] for t in plan.tasks])
    finally:
        report.wall = time.monotonic() - started
        if not keep_warm:
            with _Timed(report, "teardown"):
                fleet._cool([img for w in plan.windows for img in w["images"]])
        logger.info("%s", report.summary())
    return shape(results, epochs)


def _warm(fleet: Any, window: dict[str, Any], report: RunReport) -> None:
    """Asks for the images the window warms, as the session's plan says: the
    strategy is the session's, defined once, in Go. There is no wait for
    the pools: each acquire returns as soon as a sandbox of its image is
    ready, and one that cannot start fails its own task."""
    if images := window["warm"]:
        with _Timed(report, "create_warmpool"):
            fleet.lookahead(images)


class _Attempt:
    """One task's run, as its steps end: the bookkeeping the synchronous and
    the async runner share."""

    def __init__(self, task: dict[str, Any], epoch: int, report: RunReport):
        self.task, self.epoch, self.report = task, epoch, report
        self.started = time.monotonic()
        self.result = RunResult(task["id"], epoch, "ok")

    def unclaimed(self, e: FleetError) -> RunResult:
        """No sandbox could be had: the task did not run."""
        verdict, reason = verdict_of(e)
        r = RunResult(self.task["id"], self.epoch, verdict, error=e, reason=reason, seconds=time.monotonic() - self.started)
        self.report.task(r, ran=False)
        return r

    def claimed(self, h: Any) -> None:
        self.report.claim()
        self.result.node, self.result.resets = h.node, h.resets

    def failed(self, e: Exception) -> None:
        """fn raised, or the sandbox failed under it: the task's result."""
        self.result.verdict, self.result.reason = verdict_of(e)
        self.result.error = e

    def released(self, h: Any, outcome: str | FleetError, since: float) -> None:
        if isinstance(outcome, FleetError):
            # The work is done and scored; a sandbox the session could not
            # hand back is the session's to reap (its lease runs out).
            logger.warning("releasing %s of task %s: %s", h.id, h.task_id, outcome)
            outcome = "release"
        self.report.phase("release" if outcome in ("released", "release") else outcome, time.monotonic() - since)

    def done(self) -> RunResult:
        self.result.seconds = time.monotonic() - self.started
        self.report.task(self.result, ran=True)
        return self.result


def _one(fleet: Any, fn: Callable[..., Any], task: dict[str, Any], epoch: int, recycle: bool, report: RunReport) -> RunResult:
    a = _Attempt(task, epoch, report)
    try:
        with _Timed(report, "claim"):
            h = fleet.acquire(task["id"])
    except FleetError as e:
        return a.unclaimed(e)
    a.claimed(h)
    try:
        with _Timed(report, "process"):
            a.result.value = fn(task, h)
    except Exception as e:  # noqa: BLE001 — a task's failure is its result, as the reference keeps it
        a.failed(e)
    finally:
        since = time.monotonic()
        try:
            outcome = fleet.release(h, reuse=recycle)
        except FleetError as e:
            outcome = e
        a.released(h, outcome, since)
    return a.done()


async def arun(fleet: Any, fn: Callable[..., Any], strategy: str, concurrency: int | None, epochs: int, keep_warm: bool,
               recycle: bool) -> list[Any]:
    """AsyncSandboxFleet.run's body: fn may be a coroutine function (awaited
    on the loop, with the AsyncHandle) or a plain one (run in a thread, with
    the synchronous Handle)."""
    check_args(strategy, concurrency, epochs)
    report = RunReport(strategy)
    fleet.report = report
    started = time.monotonic()
    with _Timed(report, "plan"):
        plan = plan_of(await fleet._plan_run(strategy, concurrency or 0), recycle)
    gate = asyncio.Semaphore(plan.concurrency)
    results: list[list[RunResult]] = []

    async def one(task: dict[str, Any], epoch: int) -> RunResult:
        async with gate:
            return await _aone(fleet, fn, task, epoch, recycle, report)

    try:
        for epoch in range(epochs):
            got: dict[str, RunResult] = {}
            for window in plan.windows:
                if images := window["warm"]:
                    with _Timed(report, "create_warmpool"):
                        await fleet.lookahead(images)
                for r in await asyncio.gather(*(one(plan.by_id[tid], epoch) for tid in window["task_ids"])):
                    got[r.task_id] = r
                if done := window["let_go"]:
                    await fleet._cool(done)
            results.append([got[t["id"]] for t in plan.tasks])
    finally:
        report.wall = time.monotonic() - started
        if not keep_warm:
            with _Timed(report, "teardown"):
                await fleet._cool([img for w in plan.windows for img in w["images"]])
        logger.info("%s", report.summary())
    return shape(results, epochs)


async def _aone(fleet: Any, fn: Callable[..., Any], task: dict[str, Any], epoch: int, recycle: bool, report: RunReport) -> RunResult:
    a = _Attempt(task, epoch, report)
    try:
        with _Timed(report, "claim"):
            h = await fleet.acquire(task["id"])
    except FleetError as e:
        return a.unclaimed(e)
    a.claimed(h)
    try:
        with _Timed(report, "process"):
            # A plain function gets the synchronous handle, in a thread.
            if inspect.iscoroutinefunction(fn):
                a.result.value = await fn(task, h)
            else:
                a.result.value = await asyncio.to_thread(fn, task, h.handle)
    except Exception as e:  # noqa: BLE001
        a.failed(e)
    finally:
        since = time.monotonic()
        try:
            outcome = await fleet.release(h, reuse=recycle)
        except FleetError as e:
            outcome = e
        a.released(h, outcome, since)
    return a.done()
