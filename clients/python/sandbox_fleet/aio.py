"""The asyncio client: the calls of the synchronous client, awaited, over
asyncio streams (no thread per call, streams included: an ``async for``
over a command's output leaves the loop free between chunks). Leases are
renewed by the synchronous client's one background thread."""

from __future__ import annotations

import builtins
import contextlib
import io
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from . import _archive, _rows, runner
from ._aconnect import AsyncTransport
from ._connect import RECONNECT, b64, unb64
from .client import (_LIST, Command, _shown, MAX_OUTPUT, MAX_TAR, ExecResult, Handle, SandboxFleet, Shell, _acquire_msg, _Capped, _events_of, _failed,
                     _file_of, _handle, _listed, _Output, _lookahead_msg, _release_msg, _removed, _seconds, _signal_name,
                     _split_file, _tar_messages, _tar_of, _tar_tree, Writable)
from .errors import InfraError, TaskError

_Event = tuple[str, bytes | int | bool]


class AsyncHandle:
    """A sandbox held through AsyncSandboxFleet; ``async with`` releases it.
    Its fields are the Handle's (``.id``, ``.pod``, ``.node``, ...), read
    from ``.handle``, the synchronous Handle."""

    def __init__(self, fleet: "AsyncSandboxFleet", handle: Handle):
        self._fleet = fleet
        self._t = fleet._t
        self.handle = handle

    @property
    def id(self) -> str:
        return self.handle.id

    @property
    def task_id(self) -> str:
        return self.handle.task_id

    @property
    def image(self) -> str:
        return self.handle.image

    @property
    def cluster(self) -> str:
        return self.handle.cluster

    @property
    def namespace(self) -> str:
        return self.handle.namespace

    @property
    def claim(self) -> str:
        return self.handle.claim

    @property
    def sandbox(self) -> str:
        return self.handle.sandbox

    @property
    def pod(self) -> str:
        return self.handle.pod

    @property
    def pod_ip(self) -> str:
        return self.handle.pod_ip

    @property
    def hostname(self) -> str:
        return self.handle.hostname

    @property
    def node(self) -> str:
        return self.handle.node

    @property
    def container(self) -> str:
        return self.handle.container

    @property
    def resets(self) -> int:
        return self.handle.resets

    def endpoint(self, port: int) -> str:
        """The sandbox's in-cluster address of port."""
        return self.handle.endpoint(port)

    async def exec_stream(self, command: Command, stdin: bytes | str | None = None, timeout: float | None = None,
                          env: Mapping[str, str] | None = None, cwd: str | None = None,
                          container: str | None = None) -> AsyncGenerator[_Event, None]:
        """As ``Handle.exec_stream``, for ``async for``."""
        msg = self.handle._command(command, env, cwd, container)
        if stdin is not None:
            msg["stdin"] = b64(stdin.encode() if isinstance(stdin, str) else stdin)
        if timeout:
            msg["timeout"] = _seconds(timeout)
        async with contextlib.aclosing(self._t.server_stream("Exec", msg)) as stream:
            async for m in stream:
                for e in _events_of(m):
                    yield e

    async def exec(self, command: Command, stdin: bytes | str | None = None, timeout: float | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None, container: str | None = None,
                   check: bool = False, max_output: int = MAX_OUTPUT) -> ExecResult:
        """As ``Handle.exec``: a string is shell text, a list the argv; a
        timeout is a result (``timed_out``, 124)."""
        result = await _acollect(self.exec_stream(command, stdin=stdin, timeout=timeout, env=env, cwd=cwd, container=container),
                                 max_output)
        if check and not result.ok:
            raise TaskError(f"{_shown(command)} {_failed(result)} in sandbox {self.id}", result.exit_code, result.stdout, result.stderr)
        return result

    async def is_alive(self) -> bool:
        return await self.alive_reason() is None

    async def alive_reason(self) -> str | None:
        out = await self._t.unary("Alive", self.handle._ref())
        return None if out.get("alive") else out.get("reason", "not alive")

    async def shell(self, name: str = "default") -> "AsyncShell":
        await self._t.unary("OpenShell", self.handle._ref(shell=name))
        return AsyncShell(self, name)

    async def start(self, command: Command, env: Mapping[str, str] | None = None, cwd: str | None = None,
                    container: str | None = None) -> "AsyncProcess":
        out = await self._t.unary("Start", self.handle._command(command, env, cwd, container))
        return AsyncProcess(self, out["process"])

    @contextlib.asynccontextmanager
    async def port_forward(self, port: int) -> AsyncIterator[str]:
        """``async with h.port_forward(8000) as url:``, as Handle.port_forward."""
        out = await self._t.unary("PortForward", self.handle._ref(port=int(port)))
        try:
            yield "http://" + out["address"]
        finally:
            await self._t.unary("ClosePortForward", self.handle._ref(forward=out["forward"]))

    async def write_tar(self, directory: str, archive: bytes, chunk: int = 1 << 20) -> int:
        msgs = _tar_messages(self.id, self._fleet.client_id, directory, archive, chunk)
        return int((await self._t.client_stream("WriteFiles", msgs)).get("bytes", 0))

    async def write_files(self, directory: str, files: Mapping[str, bytes | str], mode: int = 0o644) -> int:
        return await self.write_tar(directory, _tar_of(files, mode))

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> int:
        directory, name = _split_file(path)
        return await self.write_files(directory, {name: data}, mode)

    async def read_tar(self, paths: Iterable[str], max_bytes: int = MAX_TAR) -> bytes:
        buf = io.BytesIO()
        await self.read_tar_into(paths, _Capped(buf, max_bytes, "ReadFiles"))
        return buf.getvalue()

    async def read_tar_into(self, paths: Iterable[str], out: Writable) -> int:
        msg = self.handle._ref(paths=list(paths))
        n = 0
        stream = self._t.server_stream("ReadFiles", msg)
        try:
            async for m in stream:
                chunk = unb64(m.get("tar"))
                out.write(chunk)
                n += len(chunk)
        finally:
            await stream.aclose()
        return n

    async def read_files(self, paths: Iterable[str], max_bytes: int = MAX_TAR) -> dict[str, bytes]:
        return _archive.files(await self.read_tar(paths, max_bytes), "ReadFiles", max_bytes)

    async def read_file(self, path: str, max_bytes: int = MAX_TAR) -> bytes:
        return _file_of(await self.read_files([path], max_bytes), path)

    async def list(self, path: str) -> list[str]:
        return _listed(path, await self.exec(["sh", "-c", _LIST, "sh", path]))

    async def exists(self, path: str) -> bool:
        return (await self.exec(["sh", "-c", 'test -e "$1" || test -L "$1"', "sh", path])).exit_code == 0

    async def remove(self, path: str, recursive: bool = False) -> None:
        _removed(path, await self.exec(["rm", "-rf" if recursive else "-f", "--", path]))

    async def upload(self, local_dir: str, remote_dir: str) -> int:
        return await self.write_tar(remote_dir, _tar_tree(local_dir))

    async def download(self, remote_dir: str, local_dir: str, max_bytes: int = MAX_TAR) -> builtins.list[str]:
        return _archive.untar_tree(await self.read_tar([remote_dir], max_bytes), remote_dir, local_dir, max_bytes)

    async def release(self, reuse: bool = False) -> str:
        return await self._fleet.release(self, reuse=reuse)

    async def __aenter__(self) -> "AsyncHandle":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


class AsyncShell:
    """A named long-lived shell (``AsyncHandle.shell``), as Shell."""

    def __init__(self, handle: AsyncHandle, name: str):
        self.handle = handle
        self.name = name
        self._sync = Shell(handle.handle, name)

    async def run_stream(self, script: str, timeout: float | None = None,
                         merge_stderr: bool = False) -> AsyncGenerator[_Event, None]:
        async with contextlib.aclosing(self.handle._t.server_stream("ShellRun", self._sync._run_msg(script, timeout, merge_stderr))) as stream:
            async for m in stream:
                for e in _events_of(m):
                    yield e

    async def run(self, script: str, timeout: float | None = None, merge_stderr: bool = False, check: bool = False,
                  max_output: int = MAX_OUTPUT) -> ExecResult:
        result = await _acollect(self.run_stream(script, timeout=timeout, merge_stderr=merge_stderr), max_output)
        return self._sync._checked(result, script, check)

    async def interrupt(self) -> None:
        await self.handle._t.unary("ShellInterrupt", self._sync._msg())

    async def close(self) -> None:
        await self.handle._t.unary("CloseShell", self._sync._msg())

    async def __aenter__(self) -> "AsyncShell":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncProcess:
    """A process started in a sandbox (``AsyncHandle.start``), as Process."""

    def __init__(self, handle: AsyncHandle, pid: str):
        self.handle = handle
        self.id = pid
        self.exit_code: int | None = None

    def _msg(self) -> dict[str, Any]:
        return self.handle.handle._ref(process=self.id)

    async def events(self, start: int = 0) -> AsyncGenerator[_Event, None]:
        async for m in self.handle._t.server_stream("ProcessEvents", {**self._msg(), "from": start}):
            for kind, data in _events_of(m):
                if kind == "exit":
                    self.exit_code = int(data)
                yield kind, data

    async def write_stdin(self, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        await self.handle._t.unary("WriteStdin", {**self._msg(), "data": b64(raw)})

    async def close_stdin(self) -> None:
        await self.handle._t.unary("WriteStdin", {**self._msg(), "close": True})

    async def signal(self, sig: int | str) -> None:
        await self.handle._t.unary("Signal", {**self._msg(), "signal": _signal_name(sig)})

    async def wait(self, timeout: float | None = None) -> int:
        while True:
            step = 60.0 if timeout is None else timeout
            out = await self.handle._t.unary("Wait", {**self._msg(), "timeout": _seconds(step)}, timeout=step + 30)
            if out.get("done"):
                self.exit_code = int(out.get("exitCode", 0))
                return self.exit_code
            if timeout is not None:
                raise TimeoutError(f"process {self.id} in sandbox {self.handle.id} still runs after {timeout}s")


class AsyncSandboxFleet:
    """SandboxFleet for asyncio trainers: the same methods, awaited."""

    def __init__(self, address: str, token: str | None = None, client_id: str | None = None,
                 timeout: float | None = 60.0, retries: int = 3, token_file: str | None = None,
                 reconnect: float = RECONNECT, ca_file: str | None = None):
        """As SandboxFleet's."""
        self.sync = SandboxFleet(address, token=token, client_id=client_id, timeout=timeout, retries=retries,
                                 token_file=token_file, reconnect=reconnect, ca_file=ca_file)
        self._t = AsyncTransport(self.sync._t)

    @property
    def client_id(self) -> str:
        return self.sync.client_id

    async def add_tasks(self, rows: Iterable[Mapping[str, Any] | str], id_field: str | None = None, image_field: str | None = None,
                        rewrite: Iterable[str] = ()) -> dict[str, Any]:
        return await self._t.unary("AddTasks", _rows.request(rows, id_field, image_field, rewrite))

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

    async def lookahead(self, tasks_or_images: Iterable[Any]) -> list[dict[str, Any]]:
        return (await self._t.unary("Lookahead", _lookahead_msg(tasks_or_images))).get("pools", [])

    async def wait_pools_ready(self, timeout: float = 600.0, images: Iterable[str] = ()) -> dict[str, Any]:
        out = await self._t.unary("WaitPoolsReady", {"timeout": _seconds(timeout), "images": list(images)}, timeout=timeout + 30)
        return {"ready": bool(out.get("ready")), "pools": out.get("pools", [])}

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

    async def status(self) -> dict[str, Any]:
        return await self._t.unary("Status", {})

    async def close(self) -> None:
        self.sync._stop.set()
        await self._t.unary("Close", {"clientId": self.client_id}, timeout=None)
        await self._t.close()

    def disconnect(self) -> None:
        self.sync.disconnect()


async def _acollect(events: AsyncGenerator[_Event, None], limit: int) -> ExecResult:
    """As ``_collect``, for an asyncio stream of events."""
    o = _Output(limit)
    try:
        async for kind, data in events:
            o.add(kind, data)
    finally:
        await events.aclose()
    return o.result()
