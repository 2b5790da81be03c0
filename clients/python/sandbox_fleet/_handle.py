"""A sandbox leased to a client: commands, shells, processes, files and
ports in it (``Handle``, and ``AsyncHandle`` for asyncio)."""

from __future__ import annotations

import builtins
import contextlib
import io
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _archive
from ._commands import MAX_OUTPUT, Command, ExecResult, _acollect, _argv, _Event, _collect, _events_of, _failed, _output, _seconds, _shown
from ._connect import b64, unb64
from ._files import (_LIST, MAX_TAR, Writable, _Capped, _file_of, _listed, _removed, _split_file, _tar_messages, _tar_of,
                     _tar_tree)
from ._process import AsyncProcess, Process
from ._shell import AsyncShell, Shell
from .errors import TaskError

if TYPE_CHECKING:
    from ._aconnect import AsyncCalls
    from ._fleet import AsyncSandboxFleet, SandboxFleet


@dataclass
class Handle:
    """A sandbox leased to this client. Use it as a context manager to
    release it on exit."""

    fleet: "SandboxFleet" = field(repr=False)
    id: str
    task_id: str
    image: str
    cluster: str
    namespace: str
    claim: str
    sandbox: str
    pod: str
    pod_ip: str
    hostname: str
    node: str
    container: str
    # How many times the sandbox was reset after an earlier lease (a session
    # that recycles); 0 is a fresh sandbox.
    resets: int = 0

    def _ref(self, **more: Any) -> dict[str, Any]:
        """The message fields that name this sandbox and its client."""
        return {"handle": self.id, "clientId": self.fleet.client_id, **more}

    def endpoint(self, port: int) -> str:
        """The sandbox's in-cluster address of port."""
        return f"{self.hostname}.{self.namespace}:{port}"

    def exec_stream(self, command: Command, stdin: bytes | str | None = None, timeout: float | None = None,
                    env: Mapping[str, str] | None = None, cwd: str | None = None,
                    container: str | None = None) -> Iterator[tuple[str, bytes | int | bool]]:
        """Runs command (shell text, or an argv) and yields its output as it comes: ``("stdout", bytes)``,
        ``("stderr", bytes)``, ``("timed_out", True)`` when it was stopped at
        its timeout, and last ``("exit", code)``."""
        msg = self._command(command, env, cwd, container)
        if stdin is not None:
            msg["stdin"] = b64(stdin.encode() if isinstance(stdin, str) else stdin)
        if timeout:
            msg["timeout"] = _seconds(timeout)
        # The call itself may take as long as the command, and then some.
        yield from _output(self.fleet._t.server_stream("Exec", msg, timeout=None))

    def exec(self, command: Command, stdin: bytes | str | None = None, timeout: float | None = None,
             env: Mapping[str, str] | None = None, cwd: str | None = None, container: str | None = None,
             check: bool = False, max_output: int = MAX_OUTPUT) -> ExecResult:
        """Runs command in the sandbox and returns its exit code and output
        (bytes). A string is shell text (``sh -c``: ``h.exec("make test &&
        echo ok")``), a list the argv (``h.exec(["make", "test"])``);
        anything else is a TypeError. A non-zero exit is a result, or a TaskError with
        ``check=True``; so is a command past ``timeout`` (seconds), which is
        killed in the sandbox with what it started and returned with
        ``timed_out`` and exit code 124. A sandbox that was lost raises
        SandboxLostError. Past ``max_output`` bytes of stdout and stderr
        the command is stopped and OutputTooLarge raised."""
        result = _collect(self.exec_stream(command, stdin=stdin, timeout=timeout, env=env, cwd=cwd, container=container), max_output)
        if check and not result.ok:
            raise TaskError(f"{_shown(command)} {_failed(result)} in sandbox {self.id}", result.exit_code, result.stdout, result.stderr)
        return result

    def is_alive(self) -> bool:
        """Whether the sandbox is up, from the session's watch of its Pod:
        no command runs. ``alive_reason()`` says why not."""
        return self.alive_reason() is None

    def alive_reason(self) -> str | None:
        """None while the sandbox is up; why not once it is gone or going."""
        out = self.fleet._t.unary("Alive", self._ref())
        return None if out.get("alive") else out.get("reason", "not alive")

    def shell(self, name: str = "default", container: str | None = None) -> "Shell":
        """A long-lived shell in the sandbox (bash where the image has it,
        else sh), opened if it is not open: what a script sets (``cd``,
        ``export``, ``source``, functions) the next one sees. Several named
        shells keep apart. ``container`` runs it in another container of
        the sandbox's Pod (a shell of that name open in another container
        is an InvalidArgumentError). Use it as a context manager to close
        it."""
        self.fleet._t.unary("OpenShell", self._shell_ref(name, container))
        return Shell(self, name)

    def _shell_ref(self, name: str, container: str | None) -> dict[str, Any]:
        return self._ref(shell=name, **({"container": container} if container else {}))

    def start(self, command: Command, env: Mapping[str, str] | None = None, cwd: str | None = None,
              container: str | None = None) -> "Process":
        """Starts command (shell text, or an argv) in the sandbox and returns at once: read its output as
        it comes, write its stdin, signal it, wait for it. It ends with the
        sandbox's release."""
        return Process(self, self.fleet._t.unary("Start", self._command(command, env, cwd, container))["process"])

    @contextlib.contextmanager
    def port_forward(self, port: int) -> Iterator[str]:
        """``with h.port_forward(8000) as url:`` — ``url`` is
        ``http://127.0.0.1:PORT`` on the machine ``serve`` runs on (yours,
        with the default unix socket), and reaches port 8000 in the sandbox
        through the API server's port-forward while the context lasts; the
        local port is freed after. Like ``kubectl port-forward``, anyone on
        that machine can connect to it while it is open."""
        out = self.fleet._t.unary("PortForward", self._ref(port=int(port)))
        try:
            yield "http://" + out["address"]
        finally:
            self.fleet._t.unary("ClosePortForward", self._ref(forward=out["forward"]))

    def _command(self, command: Command, env: Mapping[str, str] | None, cwd: str | None, container: str | None) -> dict[str, Any]:
        msg = self._ref(argv=_argv(command))
        if env:
            msg["env"] = dict(env)
        if cwd:
            msg["cwd"] = cwd
        if container:
            msg["container"] = container
        return msg

    def write_files(self, directory: str, files: Mapping[str, bytes | str], mode: int = 0o644) -> int:
        """Writes files (name relative to directory -> content) into
        directory, made if missing. Returns the bytes sent."""
        return self.write_tar(directory, _tar_of(files, mode))

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> int:
        """Writes one file at an absolute path in the sandbox."""
        directory, name = _split_file(path)
        return self.write_files(directory, {name: data}, mode)

    def write_tar(self, directory: str, archive: bytes, chunk: int = 1 << 20) -> int:
        """Unpacks a tar archive into directory."""
        msgs = _tar_messages(self.id, self.fleet.client_id, directory, archive, chunk)
        return int(self.fleet._t.client_stream("WriteFiles", msgs, timeout=None).get("bytes", 0))

    def read_tar(self, paths: Iterable[str], max_bytes: int = MAX_TAR) -> bytes:
        """A tar archive of files or directories (names relative to /), of
        at most ``max_bytes`` (else OutputTooLarge: read a larger tree with
        ``read_tar_into``)."""
        buf = io.BytesIO()
        self.read_tar_into(paths, _Capped(buf, max_bytes, "ReadFiles"))
        return buf.getvalue()

    def read_tar_into(self, paths: Iterable[str], out: Writable) -> int:
        """Writes a tar archive of paths into ``out`` (a binary file) as it
        comes, and returns its size: for trees too large to hold."""
        msg = self._ref(paths=list(paths))
        n = 0
        stream = self.fleet._t.server_stream("ReadFiles", msg, timeout=None)
        try:
            for m in stream:
                chunk = unb64(m.get("tar"))
                out.write(chunk)
                n += len(chunk)
        finally:
            stream.close()
        return n

    def read_files(self, paths: Iterable[str], max_bytes: int = MAX_TAR) -> dict[str, bytes]:
        """The regular files under paths, by absolute path, at most
        ``max_bytes`` in all. The archive is read as untrusted (code in
        the sandbox can replace its tar): anything but a plain tar within
        the cap raises UnsafeArchiveError."""
        return _archive.files(self.read_tar(paths, max_bytes), "ReadFiles", max_bytes)

    def read_file(self, path: str, max_bytes: int = MAX_TAR) -> bytes:
        """The content of one file in the sandbox (as read_files)."""
        return _file_of(self.read_files([path], max_bytes), path)

    def list(self, path: str) -> list[str]:
        """The names in directory path (hidden ones too), sorted."""
        return _listed(path, self.exec(["sh", "-c", _LIST, "sh", path]))

    def exists(self, path: str) -> bool:
        """Whether path names anything in the sandbox (a dangling link too)."""
        return self.exec(["sh", "-c", 'test -e "$1" || test -L "$1"', "sh", path]).exit_code == 0

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file (a directory and all in it with ``recursive``); a
        path that does not exist is no error."""
        _removed(path, self.exec(["rm", "-rf" if recursive else "-f", "--", path]))

    def upload(self, local_dir: str, remote_dir: str) -> int:
        """Copies the tree under local_dir into remote_dir (made if missing):
        files, directories, links and modes. Returns the bytes sent."""
        return self.write_tar(remote_dir, _tar_tree(local_dir))

    def download(self, remote_dir: str, local_dir: str, max_bytes: int = MAX_TAR) -> builtins.list[str]:
        """Copies the tree under remote_dir into local_dir (made if missing);
        returns the paths written. Nothing lands outside local_dir: links
        are made last, and one that leads out of it or through another
        link raises UnsafeArchiveError, as does an archive past
        ``max_bytes`` or not plain tar (see read_files)."""
        return _archive.untar_tree(self.read_tar([remote_dir], max_bytes), remote_dir, local_dir, max_bytes)

    def release(self, reuse: bool = False) -> str:
        """Hands the sandbox back; see SandboxFleet.release."""
        return self.fleet.release(self, reuse=reuse)

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.fleet.release(self)


def _handle(fleet: "SandboxFleet", h: dict[str, Any]) -> Handle:
    return Handle(fleet=fleet, id=h["id"], task_id=h.get("taskId", ""), image=h.get("image", ""),
                  cluster=h.get("cluster", ""), namespace=h.get("namespace", ""), claim=h.get("claim", ""),
                  sandbox=h.get("sandbox", ""), pod=h.get("pod", ""), pod_ip=h.get("podIp", ""),
                  hostname=h.get("hostname", ""), node=h.get("node", ""), container=h.get("container", ""),
                  resets=int(h.get("resets", 0)))


class AsyncHandle:
    """A sandbox held through AsyncSandboxFleet; ``async with`` releases it.
    Its fields are the Handle's (``.id``, ``.pod``, ``.node``, ...), read
    from ``.handle``, the synchronous Handle."""

    def __init__(self, fleet: "AsyncSandboxFleet", handle: Handle):
        self._fleet: AsyncSandboxFleet = fleet
        self._t: AsyncCalls = fleet._t
        self.handle: Handle = handle

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

    async def shell(self, name: str = "default", container: str | None = None) -> "AsyncShell":
        await self._t.unary("OpenShell", self.handle._shell_ref(name, container))
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
