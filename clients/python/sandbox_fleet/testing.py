"""FakeFleet: the SandboxFleet interface with no cluster, for trainers' unit
tests. A sandbox is a local temporary directory standing for the sandbox's
root (``/testbed/x`` is ``<dir>/testbed/x``), started as a copy of its
image's directory where ``image_roots`` gives one. Its commands run in a
mount namespace whose root is that directory (bubblewrap; see
``sandbox_fleet._jail``), with an image's environment and nothing of the
trainer's, so absolute paths in commands land in the sandbox. It checks
what the real session checks: unknown tasks, images not in the plan,
handles released twice or held by another fleet."""

from __future__ import annotations

import contextlib
import io
import os
import queue
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

from . import _jail, _rows, runner
from ._commands import MAX_OUTPUT, Command, ExecResult, _argv, _Output, _signal_name
from ._files import MAX_TAR, Writable, _Capped
from ._handle import Handle
from ._process import Process
from ._shell import Shell
from .errors import (FailedPreconditionError, InfraError, InvalidArgumentError, NotFoundError, NotWarmingError, SandboxLostError,
                     SandboxStartError, SessionClosedError)


def _descendants(pid: int) -> list[int]:
    """The processes under pid, from /proc (Linux)."""
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, more = set(), {pid}
    while more:
        more = {p for p, pp in parents.items() if pp in more and p not in found}
        found |= more
    return sorted(found)


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _kill_group(p: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def _pipe(f: IO[bytes] | None) -> IO[bytes]:
    """A pipe of a process started with stdin, stdout and stderr piped."""
    assert f is not None
    return f


class FakeShell(Shell):
    """A shell of a FakeHandle: a local bash (or sh) run as the real one is,
    its state kept between scripts."""

    handle: FakeHandle

    def __init__(self, handle: "FakeHandle", name: str):
        super().__init__(handle, name)
        program = "command -v bash >/dev/null && exec bash; exec sh"
        self._p = handle._spawn(["sh", "-c", "exec 3>&2 2>/dev/null; " + program], None, None, wrapped=False)
        self._lock = threading.Lock()
        self._running = False
        self.closed = False

    def _read_until(self, stream: IO[bytes], marker: bytes, sink: list[bytes]) -> bytes | None:
        """Copies what comes before the marker to sink and returns what
        follows it on its line; None at the shell's end."""
        buf = b""
        sep = b"\n" + marker
        while True:
            i = buf.find(sep)
            if i >= 0 and b"\n" in buf[i + len(sep):]:
                sink.append(buf[:i])
                rest = buf[i + len(sep):]
                return rest[:rest.index(b"\n")].strip()
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                sink.append(buf)
                return None
            buf += chunk

    def _signal_children(self, sig: int) -> None:
        # The shell is bwrap's one child where the sandbox is fenced.
        shell = self._p.pid
        if self.handle._fenced:
            children = [p for p in _descendants(shell) if _parent(p) == shell]
            if not children:
                return
            shell = children[0]
        for pid in _descendants(shell):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def run_stream(self, script: str, timeout: float | None = None,
                   merge_stderr: bool = False) -> Iterator[tuple[str, bytes | int | bool]]:
        r = self.run(script, timeout=timeout, merge_stderr=merge_stderr)
        if r.stdout:
            yield "stdout", r.stdout
        if r.stderr:
            yield "stderr", r.stderr
        if r.timed_out:
            yield "timed_out", True
        yield "exit", r.exit_code

    def run(self, script: str, timeout: float | None = None, merge_stderr: bool = False, check: bool = False,
            max_output: int = MAX_OUTPUT) -> ExecResult:
        h = self.handle
        h.fleet._check(h.id)
        if self.closed:
            raise NotFoundError(f"ShellRun: sandbox {h.id} has no shell {self.name!r} open (closed, exited, or never opened): open it first")
        marker = ("sandbox-fleet-" + uuid.uuid4().hex).encode()
        quoted = "'" + script.replace("'", "'\\''") + "'"
        redirect = "2>&1 3>&-" if merge_stderr else "2>&3 3>&-"
        text = f"command eval {quoted} {redirect} </dev/null\nprintf '\\n%s %d\\n' {marker.decode()} \"$?\"; printf '\\n%s\\n' {marker.decode()} >&3\n"
        out: list[bytes] = []
        err: list[bytes] = []
        tails: dict[str, bytes | None] = {}
        with self._lock:
            self._running = True
            try:
                _pipe(self._p.stdin).write(text.encode())
                _pipe(self._p.stdin).flush()
                readers = [threading.Thread(target=lambda: tails.__setitem__("out", self._read_until(_pipe(self._p.stdout), marker, out))),
                           threading.Thread(target=lambda: tails.__setitem__("err", self._read_until(_pipe(self._p.stderr), marker, err)))]
                for t in readers:
                    t.start()
                readers[0].join(timeout)
                timed_out = readers[0].is_alive()
                if timed_out:
                    # As in the sandbox: SIGINT to what the shell runs, then SIGKILL.
                    for sig, grace in ((signal.SIGINT, 1.0), (signal.SIGKILL, 2.0)):
                        self._signal_children(sig)
                        readers[0].join(grace)
                        if not readers[0].is_alive():
                            break
                    else:
                        self._close()
                        raise InfraError(f"ShellRun: the script could not be stopped, so shell {self.name} went with it (open it again)", "internal", "exec")
                for t in readers:
                    t.join()
            finally:
                self._running = False
        if tails["out"] is None:
            # The script ended the shell.
            self.closed = True
            rc = self._p.wait()
            return _capped(ExecResult(rc if rc >= 0 else 128 - rc, b"".join(out), b"".join(err)), max_output)
        result = ExecResult(124 if timed_out else int(tails["out"]), b"".join(out), b"".join(err), timed_out)
        return self._checked(_capped(result, max_output), script, check)

    def interrupt(self) -> None:
        self.handle.fleet._check(self.handle.id)
        if self._running:
            self._signal_children(signal.SIGINT)

    def _close(self) -> None:
        self.closed = True
        _kill_group(self._p)
        self._p.wait()
        for f in (self._p.stdin, self._p.stdout, self._p.stderr):
            _pipe(f).close()

    def close(self) -> None:
        self.handle.fleet._check(self.handle.id)
        self.handle._shells.pop(self.name, None)
        if not self.closed:
            self._close()


class FakeProcess(Process):
    """A process of a FakeHandle: a local process in a group of its own."""

    handle: FakeHandle

    def __init__(self, handle: "FakeHandle", pid: str, p: subprocess.Popen[bytes]):
        super().__init__(handle, pid)
        self._p = p
        self._events: list[Any] = []
        self._cond = threading.Condition()
        readers = [threading.Thread(target=self._read, args=(p.stdout, "stdout"), daemon=True),
                   threading.Thread(target=self._read, args=(p.stderr, "stderr"), daemon=True)]
        for t in readers:
            t.start()

        def ender() -> None:
            for t in readers:
                t.join()
            rc = p.wait()
            with self._cond:
                self._events.append(("exit", rc if rc >= 0 else 128 - rc))
                self._cond.notify_all()
        threading.Thread(target=ender, daemon=True).start()

    def _read(self, stream: IO[bytes], kind: str) -> None:
        while chunk := os.read(stream.fileno(), 65536):
            with self._cond:
                self._events.append((kind, chunk))
                self._cond.notify_all()

    def events(self, start: int = 0) -> Iterator[tuple[str, bytes | int]]:
        i = start
        while True:
            with self._cond:
                self._cond.wait_for(lambda: len(self._events) > i)
                batch = self._events[i:]
            for kind, data in batch:
                i += 1
                if kind == "exit":
                    self.exit_code = data
                yield kind, data
                if kind == "exit":
                    return

    def write_stdin(self, data: bytes | str) -> None:
        self.handle.fleet._check(self.handle.id)
        _pipe(self._p.stdin).write(data.encode() if isinstance(data, str) else data)
        _pipe(self._p.stdin).flush()

    def close_stdin(self) -> None:
        self.handle.fleet._check(self.handle.id)
        _pipe(self._p.stdin).close()

    def signal(self, sig: int | str) -> None:
        self.handle.fleet._check(self.handle.id)
        name = _signal_name(sig).upper()
        sig = signal.Signals[name if name.startswith("SIG") else "SIG" + name]
        if self.handle._fenced:
            # To the process and what it started, not to bwrap: it would
            # die of it and take them along unasked.
            for pid in _descendants(self._p.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        else:
            _kill_group(self._p, sig)

    def wait(self, timeout: float | None = None) -> int:
        try:
            rc = self._p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"process {self.id} in sandbox {self.handle.id} still runs after {timeout}s") from None
        self.exit_code = rc if rc >= 0 else 128 - rc
        return self.exit_code

    def _stop(self) -> None:
        _kill_group(self._p)
        self._p.wait()


class FakeHandle(Handle):
    """A sandbox of FakeFleet: a local directory."""

    fleet: FakeFleet  # type: ignore[assignment]
    root: str = ""
    _fenced: bool
    _shells: dict[str, FakeShell]
    _procs: list[FakeProcess]

    lost_reason: str | None = None

    def _prepare(self, root: str, fenced: bool) -> None:
        self.root = root
        self._fenced = fenced
        self._shells: dict[str, FakeShell] = {}
        self._procs: list[FakeProcess] = []
        _jail.prepare(root)

    def _local(self, path: str) -> str:
        return _jail.local(self.root, path)

    def _spawn(self, command: Command, env: Mapping[str, str] | None, cwd: str | None,
               wrapped: bool = True) -> subprocess.Popen[bytes]:
        """Starts command in the sandbox, in a process group of its own,
        with pipes to its stdin, stdout and stderr. ``wrapped`` runs it
        under ``sh -c 'exec "$@"'``, so that a program that is not there
        is exit 127 with sh's message, as in a container."""
        argv = _argv(command)
        if wrapped:
            argv = ["sh", "-c", 'exec "$@"', "sh", *argv]
        environment = _jail.environment(self.hostname, env)
        if self._fenced:
            return _jail.spawn(_jail.wrap(self.root, argv, cwd or "/", environment), self.root, {})
        environment = {**environment, "HOME": self._local("/root"), "SANDBOX_ROOT": self.root, **(env or {})}
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=self._local(cwd) if cwd else self.root, env=environment, start_new_session=True)

    def exec_stream(self, command: Command, stdin: bytes | str | None = None, timeout: float | None = None,
                    env: Mapping[str, str] | None = None, cwd: str | None = None,
                    container: str | None = None) -> Iterator[tuple[str, bytes | int | bool]]:
        self.fleet._check(self.id)
        if not _argv(command):
            raise InvalidArgumentError("Exec: no command: argv is empty")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        try:
            p = self._spawn(command, env, cwd)
        except (FileNotFoundError, NotADirectoryError) as e:
            yield "stderr", str(e).encode()
            yield "exit", 127 if isinstance(e, FileNotFoundError) and not cwd else 2
            return
        # Output streams as it comes, as from the sandbox: a caller that
        # stops reading (past its max_output) stops the command.
        events: queue.Queue[Any] = queue.Queue(maxsize=64)
        stop = threading.Event()

        def pump(stream: IO[bytes], kind: str) -> None:
            try:
                while chunk := os.read(stream.fileno(), 1 << 16):
                    while not stop.is_set():
                        try:
                            events.put((kind, chunk), timeout=0.1)
                            break
                        except queue.Full:
                            continue
            except (OSError, ValueError):
                pass
            with contextlib.suppress(queue.Full):
                events.put((kind, None), timeout=0.1)

        def feed() -> None:
            with contextlib.suppress(OSError, ValueError):
                _pipe(p.stdin).write(data or b"")
            with contextlib.suppress(OSError, ValueError):
                _pipe(p.stdin).close()

        threads = [threading.Thread(target=pump, args=(p.stdout, "stdout"), daemon=True),
                   threading.Thread(target=pump, args=(p.stderr, "stderr"), daemon=True),
                   threading.Thread(target=feed, daemon=True)]
        for t in threads:
            t.start()
        deadline = None if not timeout else time.monotonic() + timeout
        timed_out, open_streams = False, 2
        try:
            while open_streams:
                try:
                    kind, chunk = events.get(timeout=None if deadline is None or timed_out else max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    # As in the sandbox: the command and what it started are killed.
                    _kill_group(p)
                    timed_out = True
                    continue
                if chunk is None:
                    open_streams -= 1
                    continue
                yield kind, chunk
            p.wait()
        finally:
            stop.set()
            if p.poll() is None:
                _kill_group(p)
                p.wait()
            for t in threads:
                t.join(5)
            for f in (p.stdout, p.stderr):
                _pipe(f).close()
        self.fleet._check(self.id)
        if timed_out:
            yield "timed_out", True
            yield "exit", 124
        else:
            yield "exit", p.returncode if p.returncode >= 0 else 128 - p.returncode

    def list(self, path: str) -> list[str]:
        self.fleet._check(self.id)
        try:
            return sorted(os.listdir(self._local(path)))
        except OSError as e:
            raise FailedPreconditionError(f"list {path}: not a directory, or not readable: {e}") from None

    def exists(self, path: str) -> bool:
        self.fleet._check(self.id)
        return os.path.lexists(self._local(path))

    def remove(self, path: str, recursive: bool = False) -> None:
        self.fleet._check(self.id)
        local = self._local(path)
        if os.path.isdir(local) and not os.path.islink(local):
            if not recursive:
                raise FailedPreconditionError(f"remove {path}: rm: '{path}': Is a directory")
            shutil.rmtree(local)
        elif os.path.lexists(local):
            os.remove(local)

    def alive_reason(self) -> str | None:
        self.fleet._check(self.id, alive=False)
        return self.lost_reason

    def shell(self, name: str = "default") -> FakeShell:
        self.fleet._check(self.id)
        if name not in self._shells or self._shells[name].closed:
            self._shells[name] = FakeShell(self, name)
        return self._shells[name]

    def start(self, command: Command, env: Mapping[str, str] | None = None, cwd: str | None = None,
              container: str | None = None) -> FakeProcess:
        self.fleet._check(self.id)
        p = self._spawn(command, env, cwd)
        proc = FakeProcess(self, f"p{len(self._procs) + 1}", p)
        self._procs.append(proc)
        return proc

    @contextlib.contextmanager
    def port_forward(self, port: int) -> Iterator[str]:
        """The fake's sandbox is this machine: its port is here already."""
        self.fleet._check(self.id)
        if not 1 <= int(port) <= 65535:
            raise InvalidArgumentError(f"PortForward: port {port}: give a port from 1 to 65535")
        yield f"http://127.0.0.1:{int(port)}"

    def _end(self) -> None:
        for sh in list(self._shells.values()):
            if not sh.closed:
                sh._close()
        for p in self._procs:
            p._stop()

    def write_tar(self, directory: str, archive: bytes, chunk: int = 1 << 20) -> int:
        self.fleet._check(self.id)
        if not directory.startswith("/"):
            raise InvalidArgumentError(f"WriteFiles: directory {directory!r}: give an absolute path")
        dest = self._local(directory)
        os.makedirs(dest, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for m in tar.getmembers():
                # What a sandbox's own tar could write is inside the
                # sandbox; here that is the directory.
                root = os.path.realpath(self.root) + os.sep
                target = os.path.realpath(os.path.join(dest, m.name))
                if not target.startswith(root) or m.islnk():
                    raise InvalidArgumentError(f"WriteFiles: {m.name!r} would land outside the sandbox")
                # A relative link within the sandbox is as the sandbox has
                # it; an absolute one would point at this machine.
                if m.issym() and (m.linkname.startswith("/") or
                                  not os.path.realpath(os.path.join(os.path.dirname(target), m.linkname)).startswith(root)):
                    raise InvalidArgumentError(f"WriteFiles: link {m.name!r} -> {m.linkname!r}: FakeFleet takes relative links "
                                     "within the sandbox only")
            tar.extractall(dest)
        return len(archive)

    def read_tar(self, paths: Iterable[str], max_bytes: int = MAX_TAR) -> bytes:
        archive = self._tar(paths)
        _Capped(io.BytesIO(), max_bytes, "ReadFiles").write(archive)
        return archive

    def read_tar_into(self, paths: Iterable[str], out: Writable) -> int:
        archive = self._tar(paths)
        out.write(archive)
        return len(archive)

    def _tar(self, paths: Iterable[str]) -> bytes:
        self.fleet._check(self.id)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for p in paths:
                local = self._local(p)
                if not os.path.exists(local):
                    raise FailedPreconditionError(f"ReadFiles: tar: {p}: No such file or directory")
                tar.add(local, arcname=p.lstrip("/"))
        return buf.getvalue()


def _capped(r: ExecResult, limit: int) -> ExecResult:
    """r, or OutputTooLarge when its output is past limit, as a shell's
    run gives it."""
    o = _Output(limit)
    o.add("stdout", r.stdout)
    o.add("stderr", r.stderr)
    return r


class FakeFleet:
    """SandboxFleet with no cluster. ``FakeFleet()`` needs no argument.

    ``image_roots`` maps an image to a local directory its sandboxes start
    as a copy of (say, one holding ``testbed/`` with a repository), as a
    container starts from its image; other images start empty. ``isolate``:
    ``"auto"`` runs commands in a mount namespace of the sandbox's own where
    bubblewrap can make one, else on this machine after one loud warning;
    ``True`` requires the namespace; ``False`` runs on this machine, in the
    sandbox's directory (absolute paths in commands are this machine's)."""

    def __init__(self, client_id: str | None = None, *, image_roots: Mapping[str, str] | None = None,
                 isolate: bool | str = "auto"):
        self._isolation = _jail.Isolation(isolate)
        self._image_roots = dict(image_roots or {})
        for image, path in self._image_roots.items():
            if not os.path.isdir(path):
                raise ValueError(f"image_roots[{image!r}]: {path!r} is not a directory")
        self.client_id = client_id or "fake-" + uuid.uuid4().hex[:8]
        self._tasks: dict[str, dict[str, Any]] = {}
        self._seen: dict[str, str] = {}  # task id -> the row it came from
        self._images: dict[str, int] = {}
        self._warm: set[str] = set()
        self._held: dict[str, FakeHandle] = {}
        self._requests = 0
        self._lock = threading.Lock()
        self._closed = False
        self.counts = {"acquired": 0, "released": 0}
        self._start_failures: dict[str, tuple[int, str]] = {}

    def _open(self) -> None:
        if self._closed:
            raise SessionClosedError("the session is closed")

    def _check(self, hid: str, alive: bool = True) -> None:
        with self._lock:
            self._open()
            if hid not in self._held:
                raise NotFoundError(f"no sandbox {hid!r} is held in this session (released, expired, or never acquired)")
            reason = self._held[hid].lost_reason
        if alive and reason:
            raise SandboxLostError(f"sandbox {hid} was lost: {reason}", "aborted", "lost")

    # Failures a trainer's tests can make happen.

    def lose(self, handle: Handle | str, reason: str = "its Pod was deleted (FakeFleet.lose)") -> None:
        """Makes a held sandbox lost, as a deleted Pod is: its processes and
        shells end, every later call on it raises SandboxLostError, and
        ``is_alive()`` is False. It can still be released."""
        h = self._held[handle.id if isinstance(handle, Handle) else handle]
        h.lost_reason = reason
        h._end()

    def fail_start(self, task_or_image: str | Mapping[str, Any], times: int = 1, reason: str = "the image could not be pulled (FakeFleet.fail_start)") -> None:
        """Makes the next ``times`` acquires of a task (id or dict) or an image
        raise SandboxStartError, as a sandbox that cannot start does."""
        self._start_failures[self._image_of(task_or_image)] = (times, reason)

    def add_tasks(self, rows: Iterable[Mapping[str, Any] | str], id_field: str | None = None, image_field: str | None = None,
                  rewrite: Iterable[str] = ()) -> dict[str, Any]:
        self._open()
        texts = _rows.encode(rows)
        if not texts:
            raise InvalidArgumentError("no tasks to add")
        new = _rows.read(texts, self._seen, id_field, image_field, rewrite)
        for t in new:
            self._tasks[t["id"]] = t
            self._images[t["image"]] = self._images.get(t["image"], 0) + 1
        return {"added": len(new), "total": len(self._tasks), "pools": []}

    def _image_of(self, x: str | Mapping[str, Any]) -> str:
        if isinstance(x, Mapping):
            x = str(x["id"])
        if x in self._tasks:
            return str(self._tasks[x]["image"])
        if x in self._images:
            return x
        raise NotFoundError(f"no task or image {x!r} in this session: add it with add_tasks first")

    def lookahead(self, tasks_or_images: Iterable[Any]) -> list[dict[str, Any]]:
        self._open()
        images = {self._image_of(x) for x in tasks_or_images}
        self._warm |= images
        return [self._pool(i) for i in sorted(images)]

    def _pool(self, image: str) -> dict[str, Any]:
        n = self._images[image]
        return {"image": image, "desired": n, "ready": n if image in self._warm else 0, "warm": image in self._warm}

    def run(self, fn: Callable[..., Any], strategy: str = "naive", concurrency: int | None = None, *, epochs: int = 1,
            keep_warm: bool = False, recycle: bool = False) -> list[Any]:
        """SandboxFleet.run on local sandboxes. The fake plans no windows by
        size: naive and sliding warm every image at once, pipelined and none
        go an image at a time; concurrency is 1 unless given; it does not
        recycle (recycle=True is refused, as by a session without
        --recycle)."""
        return runner.run(self, fn, strategy, concurrency, epochs, keep_warm, recycle)

    def _plan_run(self, strategy: str, concurrency: int) -> dict[str, Any]:
        self._open()
        if not self._tasks:
            raise InvalidArgumentError("no tasks to run: add them with add_tasks first")
        images = list(dict.fromkeys(t["image"] for t in self._tasks.values()))
        groups = [images] if strategy in ("naive", "sliding") else [[i] for i in images]
        tasks = [{"id": t["id"], "image": t["image"], "metadata": {k: v for k, v in t.items() if k not in ("id", "image")}}
                 for t in self._tasks.values()]
        return {"strategy": strategy, "concurrency": concurrency or 1, "recycle": False, "tasks": tasks,
                "windows": [{"images": g, "taskIds": [t["id"] for t in tasks if t["image"] in g]} for g in groups]}

    def _cool(self, images: list[str]) -> list[str]:
        held = {h.image for h in self._held.values()}
        gone = [i for i in images if i in self._warm and i not in held]
        self._warm -= set(gone)
        return gone

    def wait_pools_ready(self, timeout: float = 600.0, images: Iterable[str] = ()) -> dict[str, Any]:
        self._open()
        names = list(images) or sorted(self._warm)
        cold = [i for i in names if i not in self._warm]
        if not names or cold:
            what = ", ".join(cold) if cold else "any image"
            raise NotWarmingError(f"WaitPoolsReady: not warming: no pool is warming for {what}, so it would not become ready: "
                             "ask for it first with Lookahead (lookahead() in Python) or Acquire")
        return {"ready": all(i in self._warm for i in names), "pools": [self._pool(i) for i in names]}

    def acquire(self, task_id: str | Mapping[str, Any] | None = None, image: str | None = None, timeout: float | None = None) -> FakeHandle:
        self._open()
        if (task_id is None) == (image is None):
            raise InvalidArgumentError("name either a task id or an image")
        img = self._image_of(task_id if task_id is not None else image or "")
        tid = str(task_id["id"] if isinstance(task_id, Mapping) else task_id or "")
        times, reason = self._start_failures.get(img, (0, ""))
        if times > 0:
            self._start_failures[img] = (times - 1, reason)
            raise SandboxStartError(f"Acquire: the sandbox of {img} could not start: {reason}", "failed_precondition", "start")
        self._warm.add(img)
        with self._lock:
            self._requests += 1
            hid = f"fake-{self._requests}"
        fenced = self._isolation.fenced()
        root = tempfile.mkdtemp(prefix="sandbox-fleet-fake-")
        if img in self._image_roots:
            shutil.copytree(self._image_roots[img], root, symlinks=True, dirs_exist_ok=True)
        # A FakeHandle's fleet is this FakeFleet, which is no SandboxFleet.
        h = FakeHandle(fleet=self, id=hid, task_id=tid, image=img, cluster="fake", namespace="fake",  # type: ignore[arg-type]
                       claim=hid, sandbox=hid, pod=hid, pod_ip="127.0.0.1", hostname=hid, node="localhost", container="sandbox")
        h._prepare(root, fenced)
        with self._lock:
            self._held[hid] = h
            self.counts["acquired"] += 1
        return h

    def release(self, handle: Handle | str, reuse: bool = False) -> str:
        """Ends its shells and processes and deletes the sandbox's directory. The fake does not recycle: with
        reuse too the sandbox is deleted, and the outcome is "released"."""
        hid = handle.id if isinstance(handle, Handle) else handle
        self._check(hid, alive=False)
        with self._lock:
            h = self._held.pop(hid)
            self.counts["released"] += 1
        h._end()
        shutil.rmtree(h.root, ignore_errors=True)
        return "released"

    def status(self) -> dict[str, Any]:
        return {"tasks": len(self._tasks), "pools": [self._pool(i) for i in sorted(self._images)],
                "handles": [{"id": h.id, "taskId": h.task_id, "image": h.image} for h in self._held.values()],
                "counts": dict(self.counts)}

    def close(self) -> None:
        for hid in list(self._held):
            self.release(hid)
        self._closed = True

    def disconnect(self) -> None:
        pass
