"""The client of a fleet session (``kubectl sandbox-fleet serve``):
``SandboxFleet``, ``AsyncSandboxFleet`` for asyncio — the same calls,
awaited, over asyncio streams; leases renewed by the synchronous client's
one background thread — and ``LookaheadWarmer``."""

from __future__ import annotations

import asyncio
import inspect
import secrets
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from . import _rows, runner
from ._commands import _seconds
from ._connect import CLIENT_KEY_HEADER, RECONNECT, Calls, Transport
from ._handle import AsyncHandle, Handle, _handle
from .errors import FleetError, InfraError
from ._start import Serve, find_plugin, serve_args
from .results import Added, Lease, Pool, PoolsReady, Status, pools_of

# How long a closed session's serve may take to tear it down and exit.
_SERVE_CLOSE = 300.0


def _lookahead_msg(tasks_or_images: Iterable[Any]) -> dict[str, Any]:
    ids, images = [], []
    for x in tasks_or_images:
        if isinstance(x, Mapping):
            ids.append(str(x["id"]))
        elif isinstance(x, str) and ("/" in x or ":" in x):
            images.append(x)
        else:
            ids.append(str(x))
    return {"taskIds": ids, "images": images}


def _acquire_msg(client_id: str, task_id: str | Mapping[str, Any] | None, image: str | None,
                 timeout: float | None) -> dict[str, Any]:
    if isinstance(task_id, Mapping):
        task_id = str(task_id["id"])
    msg = {"requestId": uuid.uuid4().hex, "clientId": client_id}
    if task_id is not None:
        msg["taskId"] = str(task_id)
    if image is not None:
        msg["image"] = image
    if timeout:
        msg["timeout"] = _seconds(timeout)
    return msg


def _release_msg(client_id: str, handle: Handle | str, reuse: bool) -> tuple[str, dict[str, Any]]:
    hid = handle if isinstance(handle, str) else handle.id
    msg: dict[str, Any] = {"handle": hid, "clientId": client_id}
    if reuse:
        msg["reuse"] = True
    return hid, msg


def _transport(address: str, token: str | None, timeout: float | None, token_file: str | None, reconnect: float,
               ca_file: str | None) -> Transport:
    """The HTTP transport to the serve at address."""
    if not address:
        raise ValueError("give the address serve printed (unix:///PATH or http(s)://HOST:PORT)")
    if token_file is not None and token is not None:
        raise ValueError("give token or token_file, not both")
    # The key binds client_id to this object at the server: no other
    # caller can act on its sandboxes, whatever id it claims.
    return Transport(address, token=token, timeout=timeout, headers={CLIENT_KEY_HEADER: secrets.token_hex(16)},
                     reconnect=reconnect, token_file=token_file, ca_file=ca_file)


class SandboxFleet:
    """A client of one fleet session.

    ``address`` is what ``serve`` printed: ``unix:///path`` or
    ``http://127.0.0.1:PORT``; over TCP give the bearer token, or
    ``token_file``, the file serve printed it is in — or, for a serve
    that admits ServiceAccounts, the Pod's projected token file (read
    again whenever the kubelet rotates it); ``ca_file`` verifies a serve
    whose certificate a cluster's CA signed. Sandboxes acquired
    here are leased to this client and only it may use them: a background
    thread renews the lease while any is held, so a crashed trainer's
    sandboxes are released by the server. The first client to call a
    session owns it: only that one may ``close`` it.

    A call made while nothing listens at ``address`` — serve restarting,
    as ``serve --resume`` does after its process died — waits up to
    ``reconnect`` seconds for it to listen again; an acquire whose
    connection broke is sent again with its request id, so it never takes
    two sandboxes. Handles acquired before the restart work after it.

    ``transport`` takes the place of HTTP to a serve: FakeFleet
    (sandbox_fleet.testing) is this class over a FakeTransport.
    """

    # The last run's report (run()).
    report: runner.RunReport | None = None

    def __init__(self, address: str = "", token: str | None = None, client_id: str | None = None,
                 timeout: float | None = 60.0, retries: int = 3, token_file: str | None = None,
                 reconnect: float = RECONNECT, ca_file: str | None = None, *, transport: Calls | None = None):
        if transport is not None and address:
            raise ValueError("give an address or a transport, not both")
        self._t = transport or _transport(address, token, timeout, token_file, reconnect, ca_file)
        self.client_id = client_id or "py-" + uuid.uuid4().hex[:12]
        self.retries = retries
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._ttl = 60.0
        # The serve this client started (start()), stopped with the session.
        self._serve: Serve | None = None

    # The plan.

    def add_tasks(self, rows: Iterable[Mapping[str, Any] | str], id_field: str | None = None, image_field: str | None = None,
                  rewrite: Iterable[str] = ()) -> Added:
        """Adds tasks to the plan: rows as ``run --tasks`` reads them, by the
        same parser — dicts (``{"id", "image"}``, SWE-bench rows with
        ``instance_id`` and maybe ``docker_image``, R2E-Gym rows with
        ``repo_name``, ``commit_hash`` and ``docker_image``; other keys kept
        as metadata) or strings (an image, or a row's JSON text).
        ``id_field``/``image_field`` name the fields to use instead;
        ``rewrite`` rules (``"FROM=TO"``) redirect images, before the
        session's own. A bad row raises FleetError naming every bad row by
        its index, and nothing is added."""
        return Added.of(self._t.unary("AddTasks", _rows.request(rows, id_field, image_field, rewrite)))

    def lookahead(self, tasks_or_images: Iterable[Any]) -> list[Pool]:
        """Starts warming the pools of these tasks (dicts or ids) or images
        ("repo:tag" strings with a ':' or '/') and returns their pools at
        once."""
        return pools_of(self._t.unary("Lookahead", _lookahead_msg(tasks_or_images)).get("pools"))

    def run(self, fn: Callable[..., Any], strategy: str = "naive", concurrency: int | None = None, *, epochs: int = 1,
            keep_warm: bool = False, recycle: bool = False) -> list[Any]:
        """Runs ``fn(task, handle)`` once for each task of the session (each
        epoch), at most ``concurrency`` at once (the session's when None),
        warming pools by ``strategy`` as the session plans it: ``naive``
        warms every image first, ``sliding`` one window of images at a
        time, ``pipelined`` the next window while one runs, ``none``
        nothing ahead. A plan of one window keeps its pools between epochs
        (several windows warm again each epoch); after the run they are
        let go unless ``keep_warm``. With ``recycle`` (a session started
        with ``--recycle``) a sandbox is reset and reused by the next task
        of its image. Returns a RunResult per task in the order the tasks
        were added (a list per epoch when ``epochs > 1``): a failure of
        ``fn`` or of the infrastructure is captured in its result, with
        its verdict, never raised. ``self.report`` is the run's RunReport.
        """
        return runner.run(self, fn, strategy, concurrency, epochs, keep_warm, recycle)

    def _plan_run(self, strategy: str, concurrency: int) -> dict[str, Any]:
        return self._t.unary("PlanRun", {"strategy": strategy, "concurrency": concurrency})

    def _cool(self, images: list[str]) -> list[str]:
        return self._t.unary("Unwarm", {"images": images}).get("images", [])

    def wait_pools_ready(self, timeout: float = 600.0, images: Iterable[str] = ()) -> PoolsReady:
        """Waits until the pools are Ready or timeout passes; returns
        PoolsReady (true when all are, with each pool), never raising for
        not ready. Pools nothing asked to warm (no lookahead or acquire)
        would never be: that raises NotWarmingError at once, naming them."""
        return PoolsReady.of(self._t.unary("WaitPoolsReady", {"timeout": _seconds(timeout), "images": list(images)},
                                           timeout=timeout + 30))

    # Sandboxes.

    def acquire(self, task_id: str | Mapping[str, Any] | None = None, image: str | None = None,
                timeout: float | None = None) -> Handle:
        """A Ready sandbox for a task (id or dict) or an image. Retried on a
        dropped connection with the same request id, so a retry never takes
        a second sandbox. Use the handle as a context manager to release it."""
        msg = _acquire_msg(self.client_id, task_id, image, timeout)
        wait = (timeout or 900.0) + 30
        for attempt in range(self.retries + 1):
            try:
                h = _handle(self, self._t.unary("Acquire", msg, timeout=wait)["handle"])
                break
            except InfraError as e:
                if e.reason != "api" or attempt == self.retries:
                    raise
        self._hold(h.id)
        return h

    def _hold(self, hid: str) -> None:
        """Renews the lease of hid until it is released."""
        with self._lock:
            self._held.add(hid)
        self._start_renewer()

    def release(self, handle: Handle | str, reuse: bool = False) -> str:
        """Hands a sandbox back and says what became of it. It is deleted
        ("released"); with ``reuse`` (a session started with ``--recycle``) it
        is reset in place first and kept for the next acquire of its image
        ("reset"), or deleted when its reset fails ("quarantined") or it had
        its maximum of resets ("rotated"). Returns once that is done."""
        hid, msg = _release_msg(self.client_id, handle, reuse)
        try:
            return self._t.unary("Release", msg).get("outcome", "released")
        finally:
            self._unhold(hid)

    def _unhold(self, hid: str) -> None:
        with self._lock:
            self._held.discard(hid)

    def renew(self) -> Lease:
        """Renews this client's leases now (the background thread does it
        while a sandbox is held)."""
        lease = Lease.of(self._t.unary("Renew", {"clientId": self.client_id}))
        self._ttl = lease.ttl or 60.0
        return lease

    def _start_renewer(self) -> None:
        with self._lock:
            if self._renewer is not None and self._renewer.is_alive():
                return
            self._renewer = threading.Thread(target=self._renew_loop, name="sandbox-fleet-lease", daemon=True)
            self._renewer.start()

    def _renew_loop(self) -> None:
        while True:
            try:
                self.renew()
            except FleetError:
                pass  # a later renewal may get through; the lease allows for it
            if self._stop.wait(max(0.05, self._ttl / 3)):
                return
            with self._lock:
                if not self._held:
                    self._renewer = None
                    return

    # The session.

    def status(self) -> Status:
        """The session's tasks, pools, held sandboxes and counts."""
        return Status.of(self._t.unary("Status", {}))

    def close(self) -> None:
        """Tears the whole session down (every sandbox and pool) and stops
        the server (and, for a session start() started, waits for it to
        end)."""
        self._stop.set()
        try:
            self._t.unary("Close", {"clientId": self.client_id}, timeout=None)
        finally:
            self._end_serve()

    def _end_serve(self) -> None:
        if self._serve is not None:
            self._serve.wait(_SERVE_CLOSE)
            self._serve.stop()

    def disconnect(self) -> None:
        """Stops renewing this client's leases without closing the session."""
        self._stop.set()

    def __enter__(self) -> "SandboxFleet":
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes a session start() started; leaves one this client only
        connected to (disconnects)."""
        if self._serve is not None:
            self.close()
        else:
            self.disconnect()


def start(config: Mapping[str, Any] | str | None = None, *, tasks: Iterable[Mapping[str, Any] | str] = (),
          namespace: str | None = None, kubeconfig: str | None = None, context: str | None = None,
          run_id: str | None = None, args: Sequence[str] = (), plugin: str | None = None, client_id: str | None = None,
          ready_timeout: float = 300.0) -> SandboxFleet:
    """Starts a session of its own — ``kubectl-sandbox_fleet serve`` as a child
    of this process, on a unix socket in a private directory — and returns
    its client, which owns it: ``close()`` (or leaving ``with``) tears the
    session down and ends serve, as does this process's end, however it
    ends (serve gets SIGTERM when the trainer dies, and tears the session
    down). ``config`` is a fleet configuration (a mapping with the fields
    of examples/fleet.yaml, or a file's path); ``args`` more serve flags
    (``["--recycle"]``); ``tasks`` rows to add at once. The plugin is
    ``plugin``, $SANDBOX_FLEET_PLUGIN, the one a platform wheel carries, or
    kubectl's on PATH; without one, or when serve does not start, it raises
    PluginError saying why.::

        with sandbox_fleet.start({"maxConcurrent": 8}, namespace="rl") as fleet:
            fleet.add_tasks(rows)
            results = fleet.run(rollout, strategy="sliding")
    """
    serve = Serve(find_plugin(plugin), serve_args(namespace, kubeconfig, context, run_id, args), config, ready_timeout)
    fleet = SandboxFleet(serve.address, client_id=client_id)
    fleet._serve = serve
    try:
        tasks = list(tasks)
        if tasks:
            fleet.add_tasks(tasks)
    except BaseException:
        fleet.close()
        raise
    return fleet


async def start_async(config: Mapping[str, Any] | str | None = None, **options: Any) -> "AsyncSandboxFleet":
    """start() for asyncio: the same session, its client an
    AsyncSandboxFleet (``async with``)."""
    fleet = await asyncio.to_thread(start, config, **options)
    afleet = AsyncSandboxFleet(transport=fleet._t, client_id=fleet.client_id)
    afleet.sync._serve = fleet._serve
    return afleet


class LookaheadWarmer:
    """Warms the next steps' images while a step runs.

    ``steps`` is a sequence of steps, each a list of tasks (dicts or ids).
    Iterating yields the steps in order; before yielding step N it asks the
    fleet to warm steps N+1 .. N+depth, so their pulls overlap step N's
    rollouts::

        for step in LookaheadWarmer(fleet, steps):
            run_rollouts(step)

    With AsyncSandboxFleet, ``async for step in LookaheadWarmer(afleet, steps)``.
    """

    def __init__(self, fleet: Any, steps: Iterable[Iterable[Any]], depth: int = 1):
        self.fleet = fleet
        self.steps = [list(s) for s in steps]
        self.depth = depth

    def _ahead(self, i: int) -> list[Any]:
        return [t for s in self.steps[i + 1:i + 1 + self.depth] for t in s]

    def __iter__(self) -> Iterator[list[Any]]:
        for i, step in enumerate(self.steps):
            for batch in ([step] if i == 0 else []) + [self._ahead(i)]:
                if batch and inspect.iscoroutine(r := self.fleet.lookahead(batch)):
                    r.close()
                    raise TypeError("LookaheadWarmer over an AsyncSandboxFleet: iterate it with `async for`")
            yield step

    async def __aiter__(self) -> AsyncIterator[list[Any]]:
        for i, step in enumerate(self.steps):
            for batch in ([step] if i == 0 else []) + [self._ahead(i)]:
                if batch and inspect.isawaitable(r := self.fleet.lookahead(batch)):
                    await r
            yield step


class AsyncSandboxFleet:
    """SandboxFleet for asyncio trainers: the same methods, awaited."""

    report: runner.RunReport | None = None

    def __init__(self, address: str = "", token: str | None = None, client_id: str | None = None,
                 timeout: float | None = 60.0, retries: int = 3, token_file: str | None = None,
                 reconnect: float = RECONNECT, ca_file: str | None = None, *, transport: Calls | None = None):
        """As SandboxFleet's."""
        self.sync = SandboxFleet(address, token=token, client_id=client_id, timeout=timeout, retries=retries,
                                 token_file=token_file, reconnect=reconnect, ca_file=ca_file, transport=transport)
        self._t = self.sync._t.asyncio()

    @property
    def client_id(self) -> str:
        return self.sync.client_id

    async def add_tasks(self, rows: Iterable[Mapping[str, Any] | str], id_field: str | None = None, image_field: str | None = None,
                        rewrite: Iterable[str] = ()) -> Added:
        return Added.of(await self._t.unary("AddTasks", _rows.request(rows, id_field, image_field, rewrite)))

    async def run(self, fn: Callable[..., Any], strategy: str = "naive", concurrency: int | None = None, *, epochs: int = 1,
                  keep_warm: bool = False, recycle: bool = False) -> list[Any]:
        """SandboxFleet.run on the loop: ``fn`` is a coroutine function
        (given the AsyncHandle) or a plain one (run in a thread, given the
        synchronous Handle)."""
        return await runner.arun(self, fn, strategy, concurrency, epochs, keep_warm, recycle)

    async def _plan_run(self, strategy: str, concurrency: int) -> dict[str, Any]:
        return await self._t.unary("PlanRun", {"strategy": strategy, "concurrency": concurrency})

    async def _cool(self, images: list[str]) -> list[str]:
        return (await self._t.unary("Unwarm", {"images": images})).get("images", [])

    async def lookahead(self, tasks_or_images: Iterable[Any]) -> list[Pool]:
        return pools_of((await self._t.unary("Lookahead", _lookahead_msg(tasks_or_images))).get("pools"))

    async def wait_pools_ready(self, timeout: float = 600.0, images: Iterable[str] = ()) -> PoolsReady:
        return PoolsReady.of(await self._t.unary("WaitPoolsReady", {"timeout": _seconds(timeout), "images": list(images)},
                                                 timeout=timeout + 30))

    async def acquire(self, task_id: str | Mapping[str, Any] | None = None, image: str | None = None, timeout: float | None = None) -> AsyncHandle:
        msg = _acquire_msg(self.client_id, task_id, image, timeout)
        wait = (timeout or 900.0) + 30
        for attempt in range(self.sync.retries + 1):
            try:
                h = _handle(self.sync, (await self._t.unary("Acquire", msg, timeout=wait))["handle"])
                break
            except InfraError as e:
                if e.reason != "api" or attempt == self.sync.retries:
                    raise
        self.sync._hold(h.id)
        return AsyncHandle(self, h)

    async def release(self, handle: AsyncHandle | Handle | str, reuse: bool = False) -> str:
        h = handle.handle if isinstance(handle, AsyncHandle) else handle
        hid, msg = _release_msg(self.client_id, h, reuse)
        try:
            return (await self._t.unary("Release", msg)).get("outcome", "released")
        finally:
            self.sync._unhold(hid)

    async def renew(self) -> Lease:
        lease = Lease.of(await self._t.unary("Renew", {"clientId": self.client_id}))
        self.sync._ttl = lease.ttl or 60.0
        return lease

    async def status(self) -> Status:
        return Status.of(await self._t.unary("Status", {}))

    async def close(self) -> None:
        self.sync._stop.set()
        try:
            await self._t.unary("Close", {"clientId": self.client_id}, timeout=None)
            await self._t.close()
        finally:
            await asyncio.to_thread(self.sync._end_serve)

    def disconnect(self) -> None:
        self.sync.disconnect()

    async def __aenter__(self) -> "AsyncSandboxFleet":
        return self

    async def __aexit__(self, *exc: object) -> None:
        """As SandboxFleet's ``with``."""
        if self.sync._serve is not None:
            await self.close()
        else:
            self.disconnect()
