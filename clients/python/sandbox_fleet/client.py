"""The synchronous client of a fleet session (``kubectl sandbox-fleet serve``)."""

from __future__ import annotations

import builtins
import contextlib
import inspect
import io
import os
import secrets
import tarfile
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Union

from . import _archive, _rows, runner
from ._connect import CLIENT_KEY_HEADER, RECONNECT, Transport, b64, unb64
from .errors import FailedPreconditionError, FleetError, InfraError, OutputTooLarge, TaskError

# The most a call keeps in memory unless its caller says otherwise: a
# command's stdout and stderr (exec, Shell.run), and a read's tar archive.
# A sandbox printing without end must not take the trainer's memory.
MAX_OUTPUT = 64 << 20
MAX_TAR = 1 << 30


class Writable(Protocol):
    """Where an archive is written as it comes: a binary file."""

    def write(self, data: bytes, /) -> Any: ...


def _seconds(t: float) -> str:
    return f"{t:.3f}s"


Command = Union[str, Sequence[str]]


def _argv(command: Command) -> list[str]:
    """The argv of a command: a string is shell text, run by ``sh -c`` (as
    the reference client, E2B and most sandbox SDKs take a command); a list
    or tuple of strings is the argv itself."""
    if isinstance(command, str):
        return ["sh", "-c", command]
    if isinstance(command, (list, tuple)) and all(isinstance(a, str) for a in command):
        return list(command)
    raise TypeError(f"command {command!r}: give shell text (a str) or an argv (a list of str), "
                    f"not {type(command).__name__}")


def _shown(command: Command) -> str:
    """The command as an error message shows it."""
    return command if isinstance(command, str) else command[0]


@dataclass
class ExecResult:
    """What a command did. ``stdout`` and ``stderr`` are bytes, exactly as the
    command wrote them; ``text()`` decodes them. ``timed_out`` says it was
    stopped at its timeout, with what it started: its exit code is then 124,
    as ``timeout(1)`` gives, and the output is what it wrote until then."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def text(self, encoding: str = "utf-8") -> tuple[str, str]:
        return self.stdout.decode(encoding, "replace"), self.stderr.decode(encoding, "replace")


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

    def shell(self, name: str = "default") -> "Shell":
        """A long-lived shell in the sandbox (bash where the image has it,
        else sh), opened if it is not open: what a script sets (``cd``,
        ``export``, ``source``, functions) the next one sees. Several named
        shells keep apart. Use it as a context manager to close it."""
        self.fleet._t.unary("OpenShell", self._ref(shell=name))
        return Shell(self, name)

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


def _tar_of(files: Mapping[str, bytes | str], mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode = len(raw), mode
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


# _LIST prints the names in "$1", each ended by NUL: a name may hold a
# newline, and not every image has find -print0.
_LIST = ('cd -- "$1" || exit 2; for f in * .[!.]* ..?*; do { [ -e "$f" ] || [ -L "$f" ]; } && printf "%s\\0" "$f"; done; exit 0')


def _listed(path: str, r: ExecResult) -> list[str]:
    if r.exit_code != 0:
        raise FailedPreconditionError(f"list {path}: not a directory, or not readable: {r.stderr.decode(errors='replace').strip()}")
    return sorted(n.decode(errors="surrogateescape") for n in r.stdout.split(b"\0") if n)


def _removed(path: str, r: ExecResult) -> None:
    if r.exit_code != 0:
        raise FailedPreconditionError(f"remove {path}: {r.stderr.decode(errors='replace').strip()}")


def _tar_tree(local_dir: str) -> bytes:
    if not os.path.isdir(local_dir):
        raise ValueError(f"upload: {local_dir!r} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(local_dir)):
            tar.add(os.path.join(local_dir, name), arcname=name)
    return buf.getvalue()


def _split_file(path: str) -> tuple[str, str]:
    directory, _, name = path.rpartition("/")
    if not path.startswith("/") or not name:
        raise ValueError(f"path {path!r}: give an absolute path to a file")
    return directory or "/", name


def _tar_messages(hid: str, client_id: str, directory: str, archive: bytes, chunk: int) -> Iterator[dict[str, Any]]:
    yield {"handle": hid, "clientId": client_id, "directory": directory, "tar": b64(archive[:chunk])}
    for i in range(chunk, len(archive), chunk):
        yield {"tar": b64(archive[i:i + chunk])}


def _file_of(files: dict[str, bytes], path: str) -> bytes:
    key = "/" + path.lstrip("/")
    if key not in files:
        raise FailedPreconditionError(f"ReadFiles: {path} is not a regular file")
    return files[key]


def _events_of(m: dict[str, Any]) -> list[tuple[str, bytes | int | bool]]:
    """The events one Exec-like stream message carries."""
    out: list[tuple[str, bytes | int | bool]] = []
    if "stdout" in m:
        out.append(("stdout", unb64(m["stdout"])))
    if "stderr" in m:
        out.append(("stderr", unb64(m["stderr"])))
    if "exitCode" in m:
        if m.get("timedOut"):
            out.append(("timed_out", True))
        out.append(("exit", int(m["exitCode"])))
    return out


def _output(messages: Iterable[dict[str, Any]]) -> Iterator[tuple[str, bytes | int | bool]]:
    for m in messages:
        yield from _events_of(m)


class _Output:
    """A command's output as it comes, up to limit bytes in all."""

    def __init__(self, limit: int):
        self.limit, self.size = limit, 0
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.code: int | None = None
        self.timed_out = False

    def add(self, kind: str, data: bytes | int | bool) -> None:
        if isinstance(data, bytes):
            self.size += len(data)
            if self.size > self.limit:
                raise OutputTooLarge(f"the command wrote more than {self.limit} bytes: it was stopped; pass a larger max_output, "
                                     "or read its output as it comes (exec_stream, Shell.run_stream, Handle.start)")
            (self.out if kind == "stdout" else self.err).append(data)
        elif kind == "timed_out":
            self.timed_out = True
        else:
            self.code = int(data)

    def result(self) -> ExecResult:
        if self.code is None:
            raise InfraError("the stream ended without an exit code", "unavailable", "exec")
        return ExecResult(self.code, b"".join(self.out), b"".join(self.err), self.timed_out)


def _collect(events: Iterator[tuple[str, bytes | int | bool]], limit: int = MAX_OUTPUT) -> ExecResult:
    """The result of a command's events; past limit bytes of output the
    stream is closed, which stops the command, and OutputTooLarge raised."""
    o = _Output(limit)
    try:
        for kind, data in events:
            o.add(kind, data)
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    return o.result()


class _Capped:
    """A binary file that takes at most limit bytes, for a read's archive."""

    def __init__(self, out: Writable, limit: int, method: str):
        self.out, self.limit, self.method, self.size = out, limit, method, 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise OutputTooLarge(f"{self.method}: the archive is larger than {self.limit} bytes: pass a larger max_bytes, "
                                 "or write it to a file as it comes with read_tar_into")
        self.out.write(data)
        return len(data)


def _failed(r: ExecResult) -> str:
    return "timed out" if r.timed_out else f"exited {r.exit_code}"


class Shell:
    """A named long-lived shell in a sandbox (``Handle.shell``)."""

    def __init__(self, handle: Handle, name: str):
        self.handle = handle
        self.name = name

    def _msg(self) -> dict[str, Any]:
        return self.handle._ref(shell=self.name)

    def _run_msg(self, script: str, timeout: float | None, merge_stderr: bool) -> dict[str, Any]:
        msg: dict[str, Any] = {**self._msg(), "script": script}
        if timeout:
            msg["timeout"] = _seconds(timeout)
        if merge_stderr:
            msg["mergeStderr"] = True
        return msg

    def run_stream(self, script: str, timeout: float | None = None,
                   merge_stderr: bool = False) -> Iterator[tuple[str, bytes | int | bool]]:
        """Runs script in the shell and yields its output as it comes, as
        ``Handle.exec_stream`` does."""
        msg = self._run_msg(script, timeout, merge_stderr)
        yield from _output(self.handle.fleet._t.server_stream("ShellRun", msg, timeout=None))

    def run(self, script: str, timeout: float | None = None, merge_stderr: bool = False,
            check: bool = False, max_output: int = MAX_OUTPUT) -> ExecResult:
        """Runs script (shell text) in the shell. Past ``timeout`` seconds it
        is interrupted, then killed, and returned with ``timed_out`` and exit
        code 124; the shell stays usable. ``merge_stderr`` interleaves stderr
        into stdout as written. A script that runs ``exit`` closes the shell.
        Past ``max_output`` bytes of output it is stopped and OutputTooLarge
        raised.
        """
        return self._checked(_collect(self.run_stream(script, timeout=timeout, merge_stderr=merge_stderr), max_output), script, check)

    def _checked(self, result: ExecResult, script: str, check: bool) -> ExecResult:
        if check and not result.ok:
            raise TaskError(f"{script!r} {_failed(result)} in shell {self.name} of {self.handle.id}",
                            result.exit_code, result.stdout, result.stderr)
        return result

    def interrupt(self) -> None:
        """Sends SIGINT to what the shell runs now, as Ctrl-C: a command that
        does not handle it ends with 130, and the shell stays."""
        self.handle.fleet._t.unary("ShellInterrupt", self._msg())

    def close(self) -> None:
        self.handle.fleet._t.unary("CloseShell", self._msg())

    def __enter__(self) -> "Shell":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _signal_name(sig: int | str) -> str:
    if isinstance(sig, int):
        import signal as _signal

        return _signal.Signals(sig).name
    return str(sig)


class Process:
    """A process started in a sandbox (``Handle.start``)."""

    def __init__(self, handle: Handle, pid: str):
        self.handle = handle
        self.id = pid
        self.exit_code: int | None = None

    def _msg(self) -> dict[str, Any]:
        return self.handle._ref(process=self.id)

    def events(self, start: int = 0) -> Iterator[tuple[str, bytes | int]]:
        """Its output from the start (or the ``start``-th event), as it
        comes: ``("stdout", bytes)``, ``("stderr", bytes)``, last
        ``("exit", code)``."""
        msg = {**self._msg(), "from": start}
        for kind, data in _output(self.handle.fleet._t.server_stream("ProcessEvents", msg, timeout=None)):
            if kind == "exit":
                self.exit_code = int(data)
            yield kind, data

    def write_stdin(self, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        self.handle.fleet._t.unary("WriteStdin", {**self._msg(), "data": b64(raw)})

    def close_stdin(self) -> None:
        self.handle.fleet._t.unary("WriteStdin", {**self._msg(), "close": True})

    def signal(self, sig: int | str) -> None:
        """Sends sig (``signal.SIGINT``, ``"SIGTERM"``, ``"KILL"``, ...) to the
        process and what it started."""
        self.handle.fleet._t.unary("Signal", {**self._msg(), "signal": _signal_name(sig)})

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ends; TimeoutError when it still runs after
        ``timeout`` seconds (None: as long as it takes)."""
        while True:
            step = 60.0 if timeout is None else timeout
            out = self.handle.fleet._t.unary("Wait", {**self._msg(), "timeout": _seconds(step)}, timeout=step + 30)
            if out.get("done"):
                self.exit_code = int(out.get("exitCode", 0))
                return self.exit_code
            if timeout is not None:
                raise TimeoutError(f"process {self.id} in sandbox {self.handle.id} still runs after {timeout}s")


def _handle(fleet: "SandboxFleet", h: dict[str, Any]) -> Handle:
    return Handle(fleet=fleet, id=h["id"], task_id=h.get("taskId", ""), image=h.get("image", ""),
                  cluster=h.get("cluster", ""), namespace=h.get("namespace", ""), claim=h.get("claim", ""),
                  sandbox=h.get("sandbox", ""), pod=h.get("pod", ""), pod_ip=h.get("podIp", ""),
                  hostname=h.get("hostname", ""), node=h.get("node", ""), container=h.get("container", ""),
                  resets=int(h.get("resets", 0)))


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
    """

    def __init__(self, address: str, token: str | None = None, client_id: str | None = None,
                 timeout: float | None = 60.0, retries: int = 3, token_file: str | None = None,
                 reconnect: float = RECONNECT, ca_file: str | None = None):
        if token_file is not None and token is not None:
            raise ValueError("give token or token_file, not both")
        # The key binds client_id to this object at the server: no other
        # caller can act on its sandboxes, whatever id it claims.
        self._t = Transport(address, token=token, timeout=timeout, headers={CLIENT_KEY_HEADER: secrets.token_hex(16)},
                            reconnect=reconnect, token_file=token_file, ca_file=ca_file)
        self.client_id = client_id or "py-" + uuid.uuid4().hex[:12]
        self.retries = retries
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._ttl = 60.0

    # The plan.

    def add_tasks(self, rows: Iterable[Mapping[str, Any] | str], id_field: str | None = None, image_field: str | None = None,
                  rewrite: Iterable[str] = ()) -> dict[str, Any]:
        """Adds tasks to the plan: rows as ``run --tasks`` reads them, by the
        same parser — dicts (``{"id", "image"}``, SWE-bench rows with
        ``instance_id`` and maybe ``docker_image``, R2E-Gym rows with
        ``repo_name``, ``commit_hash`` and ``docker_image``; other keys kept
        as metadata) or strings (an image, or a row's JSON text).
        ``id_field``/``image_field`` name the fields to use instead;
        ``rewrite`` rules (``"FROM=TO"``) redirect images, before the
        session's own. A bad row raises FleetError naming every bad row by
        its index, and nothing is added. Returns added, total, pools."""
        return self._t.unary("AddTasks", _rows.request(rows, id_field, image_field, rewrite))

    def lookahead(self, tasks_or_images: Iterable[Any]) -> list[dict[str, Any]]:
        """Starts warming the pools of these tasks (dicts or ids) or images
        ("repo:tag" strings with a ':' or '/') and returns at once."""
        return self._t.unary("Lookahead", _lookahead_msg(tasks_or_images)).get("pools", [])

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

    def wait_pools_ready(self, timeout: float = 600.0, images: Iterable[str] = ()) -> dict[str, Any]:
        """Waits until the pools are Ready or timeout passes; returns
        {"ready": bool, "pools": [...]}, never raising for not ready. Pools
        nothing asked to warm (no lookahead or acquire) would never be: that
        raises FleetError at once, naming them."""
        out = self._t.unary("WaitPoolsReady", {"timeout": _seconds(timeout), "images": list(images)},
                            timeout=timeout + 30)
        return {"ready": bool(out.get("ready")), "pools": out.get("pools", [])}

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

    def renew(self) -> dict[str, Any]:
        out = self._t.unary("Renew", {"clientId": self.client_id})
        ttl = out.get("leaseTtl", "60s")
        self._ttl = float(ttl.rstrip("s")) if isinstance(ttl, str) else 60.0
        return out

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

    def status(self) -> dict[str, Any]:
        return self._t.unary("Status", {})

    def close(self) -> None:
        """Tears the whole session down (every sandbox and pool) and stops
        the server."""
        self._stop.set()
        self._t.unary("Close", {"clientId": self.client_id}, timeout=None)

    def disconnect(self) -> None:
        """Stops renewing this client's leases without closing the session."""
        self._stop.set()


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
