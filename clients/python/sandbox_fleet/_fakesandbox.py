"""The sandboxes of sandbox_fleet.testing's fake session: a local directory
each, standing for the sandbox's root, and the commands, shells and
processes started in it — fenced in a mount namespace of their own where
bubblewrap can make one (``_jail``). Each speaks in the session's wire
messages (base64 output, the exit message), as serve's sandboxes do."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

from . import _jail
from ._connect import Stream, b64
from .errors import FailedPreconditionError, InfraError, SandboxLostError

# The one container of a fake sandbox.
CONTAINER = "sandbox"

# How much of a tar archive one ReadFiles message carries, as serve sends it.
TAR_CHUNK = 1 << 20


def _descendants(pid: int) -> list[int]:
    """The processes under pid, from /proc (Linux)."""
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
    found, more = set(), {pid}
    while more:
        more = {p for p, pp in parents.items() if pp in more and p not in found}
        found |= more
    return sorted(found)


def _children(pid: int) -> list[int]:
    """What pid started that is its own child."""
    out = []
    for p in _descendants(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(p)
    return out


def kill_group(p: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, sig)


def _signal_tree(pid: int, sig: int) -> None:
    for p in _descendants(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


def pipe(f: IO[bytes] | None) -> IO[bytes]:
    """A pipe of a process started with stdin, stdout and stderr piped."""
    assert f is not None
    return f


def exit_code(rc: int) -> int:
    """An exit status as a container gives it: 128+N for signal N."""
    return rc if rc >= 0 else 128 - rc


def end_message(code: int, timed_out: bool = False) -> dict[str, Any]:
    return {"exitCode": code, "timedOut": True} if timed_out else {"exitCode": code}


class Sandbox:
    """A sandbox of the fake session: a directory (a copy of image_root,
    its image's files, where given), the processes and shells started in
    it, and whom it is leased to."""

    def __init__(self, hid: str, image: str, image_root: str | None, fenced: bool):
        self.id, self.image, self.image_root, self.fenced = hid, image, image_root, fenced
        self.task_id = ""
        self.client = ""
        self.resets = 0
        self.lost: str | None = None
        self.root = tempfile.mkdtemp(prefix="sandbox-fleet-fake-")
        self._fill()
        self.shells: dict[str, Shell] = {}
        self.procs: dict[str, Proc] = {}
        self.forwards: set[str] = set()

    def _fill(self) -> None:
        """Makes the directory its image's: a copy of the image's root (the
        baseline a reset goes back to)."""
        if self.image_root:
            shutil.copytree(self.image_root, self.root, symlinks=True, dirs_exist_ok=True)
        _jail.prepare(self.root)

    def wire(self) -> dict[str, Any]:
        """The sandbox as the session's Handle message gives it."""
        return {"id": self.id, "taskId": self.task_id, "image": self.image, "cluster": "fake", "namespace": "fake",
                "claim": self.id, "sandbox": self.id, "pod": self.id, "podIp": "127.0.0.1", "hostname": self.id,
                "node": "localhost", "container": CONTAINER, "clientId": self.client,
                **({"resets": self.resets} if self.resets else {})}

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | None) -> subprocess.Popen[bytes]:
        """Starts argv in the sandbox, in a process group of its own, with
        pipes to its stdin, stdout and stderr."""
        environment = _jail.environment(self.id, env)
        if self.fenced:
            return _jail.spawn(_jail.wrap(self.root, argv, cwd or "/", environment, self.id), self.root, {})
        environment = {**environment, "HOME": _jail.local(self.root, "/root"), "SANDBOX_ROOT": self.root, **(env or {})}
        return subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=_jail.local(self.root, cwd) if cwd else self.root, env=environment,
                                start_new_session=True)

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | None) -> subprocess.Popen[bytes]:
        """Starts a caller's argv under ``sh -c 'exec "$@"'``, so that a
        program that is not there is exit 127 with sh's message, as in a
        container."""
        return self.spawn(["sh", "-c", 'exec "$@"', "sh", *argv], env, cwd)

    def exec(self, argv: Sequence[str], stdin: bytes | None, timeout: float | None, env: Mapping[str, str] | None,
             cwd: str | None) -> Stream:
        """Runs argv and yields the Exec stream's messages as its output
        comes: a caller that stops reading stops the command, as closing
        the stream does at serve."""
        try:
            p = self.command(argv, env, cwd)
        except (FileNotFoundError, NotADirectoryError) as e:
            yield {"stderr": b64(str(e).encode())}
            yield end_message(2)
            return
        events: queue.Queue[tuple[str, bytes | None]] = queue.Queue(maxsize=64)
        stop = threading.Event()

        def pump(stream: IO[bytes], kind: str) -> None:
            with contextlib.suppress(OSError, ValueError):
                while chunk := os.read(stream.fileno(), 1 << 16):
                    while not stop.is_set():
                        try:
                            events.put((kind, chunk), timeout=0.1)
                            break
                        except queue.Full:
                            continue
            with contextlib.suppress(queue.Full):
                events.put((kind, None), timeout=0.1)

        def feed() -> None:
            with contextlib.suppress(OSError, ValueError):
                pipe(p.stdin).write(stdin or b"")
            with contextlib.suppress(OSError, ValueError):
                pipe(p.stdin).close()

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
                    wait = None if deadline is None or timed_out else max(0.0, deadline - time.monotonic())
                    kind, chunk = events.get(timeout=wait)
                except queue.Empty:
                    # As in the sandbox: the command and what it started are killed.
                    kill_group(p)
                    timed_out = True
                    continue
                if chunk is None:
                    open_streams -= 1
                    continue
                yield {kind: b64(chunk)}
            p.wait()
        finally:
            stop.set()
            if p.poll() is None:
                kill_group(p)
                p.wait()
            for t in threads:
                t.join(5)
            for f in (p.stdout, p.stderr):
                pipe(f).close()
        self.check_alive()
        yield end_message(124, True) if timed_out else end_message(exit_code(p.returncode))

    def check_alive(self) -> None:
        """Raises SandboxLostError once the sandbox was lost."""
        if self.lost:
            raise SandboxLostError(f"sandbox {self.id} was lost: {self.lost}", "aborted", "lost")

    def untar(self, directory: str, chunks: Iterable[bytes]) -> int:
        """Unpacks the archive of chunks into directory (made if missing)
        with the sandbox's own tar, as serve does; returns its size."""
        # Relative to /, which is the sandbox's root fenced or not.
        p = self.spawn(["sh", "-c", 'mkdir -p -- "$1" && exec tar -x -f - -C "$1"', "sh", "." + directory], None, "/")
        n = 0
        with contextlib.suppress(BrokenPipeError):
            for chunk in chunks:
                n += len(chunk)
                pipe(p.stdin).write(chunk)
        with contextlib.suppress(BrokenPipeError):
            pipe(p.stdin).close()
        err = pipe(p.stderr).read()
        pipe(p.stdout).read()
        rc = p.wait()
        for f in (p.stdout, p.stderr):
            pipe(f).close()
        if rc != 0:
            raise FailedPreconditionError(f"tar in sandbox {self.id} exited {exit_code(rc)}: {err.decode(errors='replace').strip()}")
        return n

    def tar(self, rel: Sequence[str]) -> Stream:
        """Streams a tar archive of paths (relative to /) made by the
        sandbox's own tar, as serve does."""
        p = self.spawn(["sh", "-c", 'exec tar -c -f - -- "$@"', "sh", *rel], None, "/")
        pipe(p.stdin).close()
        errors: list[bytes] = []
        reader = threading.Thread(target=lambda: errors.append(pipe(p.stderr).read()), daemon=True)
        reader.start()
        try:
            while chunk := pipe(p.stdout).read(TAR_CHUNK):
                yield {"tar": b64(chunk)}
            rc = p.wait()
            reader.join()
            if rc != 0:
                raise FailedPreconditionError(f"tar in sandbox {self.id} exited {exit_code(rc)}: "
                                              f"{b''.join(errors).decode(errors='replace').strip()}")
        finally:
            if p.poll() is None:
                kill_group(p)
                p.wait()
            reader.join(5)
            for f in (p.stdout, p.stderr):
                pipe(f).close()

    def end(self) -> None:
        """Ends its shells and processes."""
        for sh in list(self.shells.values()):
            sh.close()
        self.shells.clear()
        for proc in self.procs.values():
            proc.stop()

    def reset(self) -> None:
        """Back to its baseline, as a recycling session resets a sandbox:
        nothing runs in it and its files are its image's again."""
        self.end()
        self.procs.clear()
        self.forwards.clear()
        shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(self.root)
        self._fill()

    def delete(self) -> None:
        self.end()
        shutil.rmtree(self.root, ignore_errors=True)


class Shell:
    """A long-lived shell of a fake sandbox: bash (or sh), its state kept
    between scripts; each script ends with a marker line on stdout (its
    exit status) and on the shell's own stderr, as serve's shells do."""

    def __init__(self, sandbox: Sandbox, name: str):
        self.sandbox, self.name = sandbox, name
        program = "command -v bash >/dev/null && exec bash; exec sh"
        self._p = sandbox.spawn(["sh", "-c", "exec 3>&2 2>/dev/null; " + program], None, None)
        self._lock = threading.Lock()
        self.running = False
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

    def signal_children(self, sig: int) -> None:
        """Signals what the shell runs, not the shell (nor bwrap above it)."""
        shell = self._p.pid
        if self.sandbox.fenced:
            children = _children(shell)
            if not children:
                return
            shell = children[0]
        _signal_tree(shell, sig)

    def run(self, script: str, timeout: float | None, merge_stderr: bool) -> Stream:
        marker = ("sandbox-fleet-" + uuid.uuid4().hex).encode()
        quoted = "'" + script.replace("'", "'\\''") + "'"
        redirect = "2>&1 3>&-" if merge_stderr else "2>&3 3>&-"
        text = (f"command eval {quoted} {redirect} </dev/null\nprintf '\\n%s %d\\n' {marker.decode()} \"$?\"; "
                f"printf '\\n%s\\n' {marker.decode()} >&3\n")
        out: list[bytes] = []
        err: list[bytes] = []
        tails: dict[str, bytes | None] = {}
        with self._lock:
            self.running = True
            try:
                pipe(self._p.stdin).write(text.encode())
                pipe(self._p.stdin).flush()
                readers = [threading.Thread(target=lambda: tails.__setitem__("out", self._read_until(pipe(self._p.stdout), marker, out))),
                           threading.Thread(target=lambda: tails.__setitem__("err", self._read_until(pipe(self._p.stderr), marker, err)))]
                for t in readers:
                    t.start()
                readers[0].join(timeout)
                timed_out = readers[0].is_alive()
                if timed_out:
                    # As in the sandbox: SIGINT to what the shell runs, then SIGKILL.
                    for sig, grace in ((signal.SIGINT, 1.0), (signal.SIGKILL, 2.0)):
                        self.signal_children(sig)
                        readers[0].join(grace)
                        if not readers[0].is_alive():
                            break
                    else:
                        self.close()
                        raise InfraError(f"the script could not be stopped, so shell {self.name} went with it (open it again)",
                                         "internal", "exec")
                for t in readers:
                    t.join()
            finally:
                self.running = False
        for kind, data in (("stdout", b"".join(out)), ("stderr", b"".join(err))):
            if data:
                yield {kind: b64(data)}
        if tails["out"] is None:
            # The script ended the shell.
            self.closed = True
            yield end_message(exit_code(self._p.wait()))
            return
        yield end_message(124, True) if timed_out else end_message(int(tails["out"]))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        kill_group(self._p)
        self._p.wait()
        for f in (self._p.stdin, self._p.stdout, self._p.stderr):
            pipe(f).close()


class Proc:
    """A process started in a fake sandbox: its output kept as events, in
    order, for any number of readers."""

    def __init__(self, sandbox: Sandbox, pid: str, p: subprocess.Popen[bytes]):
        self.sandbox, self.id, self._p = sandbox, pid, p
        self.events: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.code: int | None = None
        readers = [threading.Thread(target=self._read, args=(p.stdout, "stdout"), daemon=True),
                   threading.Thread(target=self._read, args=(p.stderr, "stderr"), daemon=True)]
        for t in readers:
            t.start()

        def ender() -> None:
            for t in readers:
                t.join()
            code = exit_code(p.wait())
            with self.cond:
                self.code = code
                self.events.append(end_message(code))
                self.cond.notify_all()
        threading.Thread(target=ender, daemon=True).start()

    def _read(self, stream: IO[bytes], kind: str) -> None:
        while chunk := os.read(stream.fileno(), 65536):
            with self.cond:
                self.events.append({kind: b64(chunk)})
                self.cond.notify_all()

    def stream(self, start: int) -> Stream:
        i = start
        while True:
            with self.cond:
                self.cond.wait_for(lambda: len(self.events) > i)
                batch = self.events[i:]
            for m in batch:
                i += 1
                yield m
                if "exitCode" in m:
                    return

    def write(self, data: bytes | None, close: bool) -> None:
        with contextlib.suppress(OSError, ValueError):
            if data:
                pipe(self._p.stdin).write(data)
                pipe(self._p.stdin).flush()
            if close:
                pipe(self._p.stdin).close()

    def signal(self, sig: signal.Signals) -> None:
        if self.sandbox.fenced:
            # To the process and what it started, not to bwrap: it would
            # die of it and take them along unasked.
            _signal_tree(self._p.pid, sig)
        else:
            kill_group(self._p, sig)

    def wait(self, timeout: float | None) -> dict[str, Any]:
        with self.cond:
            self.cond.wait_for(lambda: self.code is not None, timeout)
            return {"done": True, "exitCode": self.code} if self.code is not None else {}

    def stop(self) -> None:
        kill_group(self._p)
        self._p.wait()
