"""FakeFleet and AsyncFakeFleet: the real SandboxFleet and AsyncSandboxFleet
over a fake transport, for trainers' unit tests with no cluster.

``FakeSession`` serves the fleet session's API in this process, message
for message as ``serve`` does (the JSON of api/fleet/v1, base64 streams and
errors with their codes and reasons), and ``FakeTransport`` hands it the
client's calls in place of HTTP, as httpx's ``MockTransport`` does. So the
code a trainer's tests exercise — the clients, handles, shells, processes,
files, the runner, ``LookaheadWarmer`` and the adapters — is the code that
talks to ``serve``.

A sandbox is a local temporary directory standing for the sandbox's root
(``/testbed/x`` is ``<dir>/testbed/x``), started as a copy of its image's
directory where ``image_roots`` gives one. Its commands run in a mount
namespace whose root is that directory (bubblewrap; see
``sandbox_fleet._jail``), with an image's environment and nothing of the
trainer's, so absolute paths in commands land in the sandbox. A run's
windows are planned by the plugin's own planner (``kubectl-sandbox_fleet
plan --offline``) where the plugin is installed, with the flags given as
``plan_args``, as serve plans them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import subprocess
import threading
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from . import _jail, _rows
from ._aconnect import AsyncStream
from ._connect import Stream, unb64
from ._fakesandbox import CONTAINER, Proc, Sandbox, Shell
from ._fleet import AsyncSandboxFleet, SandboxFleet
from ._start import find_plugin
from ._handle import AsyncHandle, Handle
from .errors import (FleetError, ForeignHandleError, InvalidArgumentError, NotFoundError, NotWarmingError, PluginError,
                     SandboxLostError, SandboxStartError, SessionClosedError, from_connect)


def _seconds(text: Any) -> float | None:
    """A Duration's JSON (``"1.500s"``) in seconds; None when unset."""
    return float(str(text).rstrip("s")) if text else None


class FakeSession:
    """The fleet session's API served in this process, on local sandboxes.

    ``image_roots`` maps an image to a local directory its sandboxes start
    as a copy of (say, one holding ``testbed/`` with a repository), as a
    container starts from its image; other images start empty. ``isolate``:
    ``"auto"`` runs commands in a mount namespace of the sandbox's own where
    bubblewrap can make one, else on this machine after one loud warning;
    ``True`` requires the namespace; ``False`` runs on this machine, in the
    sandbox's directory (absolute paths in commands are this machine's).
    ``recycle`` is serve's ``--recycle``: a release with reuse resets the
    sandbox to its image's files and keeps it for the next acquire of its
    image, ``max_reuses`` times. ``plan_args`` are the flags serve would be
    given (``--max-concurrent 8``, ``--window-size 2``, ``-f fleet.yaml``):
    a run's windows are planned by ``plugin`` (the kubectl plugin, found on
    PATH when None) with them, offline."""

    def __init__(self, *, image_roots: Mapping[str, str] | None = None, isolate: bool | str = "auto",
                 recycle: bool = False, max_reuses: int = 32, plan_args: Sequence[str] = (), plugin: str | None = None):
        self._isolation = _jail.Isolation(isolate)
        self._image_roots = dict(image_roots or {})
        for image, path in self._image_roots.items():
            if not os.path.isdir(path):
                raise ValueError(f"image_roots[{image!r}]: {path!r} is not a directory")
        if max_reuses < 1:
            raise ValueError(f"max_reuses={max_reuses}: a recycled sandbox is reset at least once")
        self.recycle, self.max_reuses = recycle, max_reuses
        self.plan_args = list(plan_args)
        self.plugin = plugin
        self.run_id = "fake-" + uuid.uuid4().hex[:8]
        self._lock = threading.RLock()
        self._tasks: dict[str, dict[str, Any]] = {}
        self._seen: dict[str, str] = {}  # task id -> the row it came from
        self._images: dict[str, int] = {}
        self._replicas: dict[str, int] = {}
        self._warm: set[str] = set()
        self._held: dict[str, Sandbox] = {}
        self._clean: dict[str, list[Sandbox]] = {}
        self._requests: dict[str, tuple[str, str, str]] = {}  # request id -> client, what, handle
        self._keys: dict[str, str] = {}  # client id -> its key
        self._owner = ""
        self._sandboxes = 0
        self._closed = False
        self.counts = {"acquired": 0, "released": 0, "failed": 0, "execs": 0, "reused": 0}
        self._start_failures: dict[str, tuple[int, str]] = {}
        self._unary: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            name: getattr(self, "_" + name) for name in (
                "AddTasks", "PlanRun", "Unwarm", "Lookahead", "WaitPoolsReady", "Acquire", "Release", "Renew", "Status",
                "Close", "Alive", "OpenShell", "ShellInterrupt", "CloseShell", "Start", "WriteStdin", "Signal", "Wait",
                "PortForward", "ClosePortForward")}
        self._streams: dict[str, Callable[[dict[str, Any]], Stream]] = {
            "Exec": self._Exec, "ShellRun": self._ShellRun, "ProcessEvents": self._ProcessEvents, "ReadFiles": self._ReadFiles}

    # The calls, as FakeTransport makes them.

    def unary(self, method: str, msg: dict[str, Any], key: str) -> dict[str, Any]:
        handler = self._unary.get(method)
        if handler is None:
            raise _unimplemented(method)
        self._admit(msg, key)
        return handler(msg)

    def server_stream(self, method: str, msg: dict[str, Any], key: str) -> Stream:
        handler = self._streams.get(method)
        if handler is None:
            raise _unimplemented(method)
        self._admit(msg, key)
        return handler(msg)

    def client_stream(self, method: str, msgs: Iterable[dict[str, Any]], key: str) -> dict[str, Any]:
        if method != "WriteFiles":
            raise _unimplemented(method)
        it = iter(msgs)
        first = next(it, None)
        if first is None:
            raise InvalidArgumentError("no message: the first names the handle and the directory")
        self._admit(first, key)
        return self._WriteFiles(first, it)

    def _admit(self, msg: dict[str, Any], key: str) -> None:
        """Binds a client id to the key of the first call naming it, as
        serve does: no other caller may act as that client."""
        client = msg.get("clientId")
        if not client:
            return
        with self._lock:
            bound = self._keys.setdefault(client, key)
            self._owner = self._owner or client
        if bound != key:
            raise ForeignHandleError(f"client id {client!r} is another client's: give each client an id of its own",
                                     "permission_denied", "foreign")

    # Failures a trainer's tests can make happen.

    def lose(self, hid: str, reason: str = "its Pod was deleted (FakeFleet.lose)") -> None:
        """Makes a held sandbox lost, as a deleted Pod is: its processes and
        shells end, every later call on it raises SandboxLostError, and
        ``is_alive()`` is False. It can still be released."""
        with self._lock:
            sb = self._held[hid]
            sb.lost = reason
        sb.end()

    def fail_start(self, task_or_image: str | Mapping[str, Any], times: int = 1,
                   reason: str = "the image could not be pulled (FakeFleet.fail_start)") -> None:
        """Makes the next ``times`` acquires of a task (id or dict) or an image
        raise SandboxStartError, as a sandbox that cannot start does."""
        with self._lock:
            self._start_failures[self._image_of(task_or_image)] = (times, reason)

    def root_of(self, hid: str) -> str:
        """The local directory that is held sandbox hid's root."""
        with self._lock:
            return self._held[hid].root

    # The plan.

    def _open(self) -> None:
        if self._closed:
            raise SessionClosedError("the session is closed", "failed_precondition", "closed")

    def _AddTasks(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._open()
            texts = list(msg.get("rows") or [])
            if not texts:
                raise InvalidArgumentError("no tasks to add")
            new = _rows.read(texts, self._seen, msg.get("idField"), msg.get("imageField"), msg.get("rewrite") or ())
            changes = []
            for t in new:
                self._tasks[t["id"]] = t
                before = self._images.get(t["image"], 0)
                self._images[t["image"]] = before + 1
                changes.append({"image": t["image"], "before": before, "replicas": before + 1})
            return {"added": len(new), "total": len(self._tasks), "pools": changes}

    def _image_of(self, x: str | Mapping[str, Any]) -> str:
        if isinstance(x, Mapping):
            x = str(x["id"])
        if x in self._tasks:
            return str(self._tasks[x]["image"])
        if x in self._images:
            return x
        raise NotFoundError(f"no task or image {x!r} in this session: add it with AddTasks first")

    def _pool(self, image: str) -> dict[str, Any]:
        desired = self._replicas.get(image, self._images[image])
        warm = image in self._warm
        return {"image": image, "name": "fake-" + image.replace("/", "-").replace(":", "-"), "cluster": "fake",
                "tasks": self._images[image], "desired": desired, "ready": desired if warm else 0, "warm": warm}

    def _Lookahead(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._open()
            images = {self._image_of(x) for x in list(msg.get("taskIds") or []) + list(msg.get("images") or [])}
            self._warm |= images
            return {"pools": [self._pool(i) for i in sorted(images)]}

    def _Unwarm(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._open()
            held = {sb.image for sb in self._held.values()}
            gone = [i for i in msg.get("images") or [] if i in self._warm and i not in held]
            self._warm -= set(gone)
            for i in gone:
                for sb in self._clean.pop(i, []):
                    sb.delete()
            return {"images": gone}

    def _WaitPoolsReady(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._open()
            names = list(msg.get("images") or []) or sorted(self._warm)
            cold = [i for i in names if i not in self._warm]
            if not names or cold:
                what = ", ".join(cold) if cold else "any image"
                raise NotWarmingError(f"not warming: no pool is warming for {what}, so it would not become ready: "
                                      "ask for it first with Lookahead (lookahead() in Python) or Acquire",
                                      "failed_precondition", "not_warming")
            return {"ready": True, "pools": [self._pool(i) for i in names]}

    def _PlanRun(self, msg: dict[str, Any]) -> dict[str, Any]:
        strategy, concurrency = msg.get("strategy") or "naive", int(msg.get("concurrency") or 0)
        with self._lock:
            self._open()
            if not self._tasks:
                raise InvalidArgumentError("no tasks to run: add them with AddTasks first")
            tasks = list(self._tasks.values())
        windows, concurrency, replicas = _plan(self.plugin, self.plan_args, tasks, strategy, concurrency)
        with self._lock:
            self._replicas.update(replicas)
        wire_tasks = [{"id": t["id"], "image": t["image"], "metadata": {k: v for k, v in t.items() if k not in ("id", "image")}}
                      for t in tasks]
        return {"strategy": strategy, "concurrency": concurrency, "recycle": self.recycle, "tasks": wire_tasks,
                "windows": [{**w, "taskIds": [t["id"] for t in tasks if t["image"] in w["images"]]} for w in windows]}

    # Leases.

    def _Acquire(self, msg: dict[str, Any]) -> dict[str, Any]:
        client, rid = msg.get("clientId", ""), msg.get("requestId", "")
        tid, image = msg.get("taskId"), msg.get("image")
        with self._lock:
            self._open()
            if not client:
                raise InvalidArgumentError("a client id is required")
            if (tid is None) == (image is None):
                raise InvalidArgumentError("name either a task id or an image")
            what = (tid or "") + (image or "")
            if rid in self._requests:
                # A retry of an acquire: its sandbox, not a second one.
                c, w, hid = self._requests[rid]
                if (c, w) != (client, what):
                    raise InvalidArgumentError(f"request id {rid!r} was used for another acquire; use a new id per acquire")
                if hid not in self._held:
                    raise NotFoundError(f"the sandbox of request {rid!r} ({hid}) was released already")
                return {"handle": self._held[hid].wire()}
            img = self._image_of(tid if tid is not None else image or "")
            times, reason = self._start_failures.get(img, (0, ""))
            if times > 0:
                self._start_failures[img] = (times - 1, reason)
                self.counts["failed"] += 1
                raise SandboxStartError(f"the sandbox of {img} could not start: {reason}", "failed_precondition", "start")
            self._warm.add(img)
            clean = self._clean.get(img)
            sb = clean.pop(0) if clean else None
            if sb is None:
                self._sandboxes += 1
                hid = f"fake-{self._sandboxes}"
        if sb is None:
            sb = Sandbox(hid, img, self._image_roots.get(img), self._isolation.fenced())
        with self._lock:
            sb.task_id, sb.client = tid or "", client
            self._held[sb.id] = sb
            if rid:
                self._requests[rid] = (client, what, sb.id)
            self.counts["acquired"] += 1
            self.counts["reused"] += 1 if sb.resets else 0
            return {"handle": sb.wire()}

    def _held_by(self, msg: dict[str, Any], alive: bool = True) -> Sandbox:
        """The sandbox msg names, held by msg's client; a lost one only
        where ``alive`` is False."""
        hid = msg.get("handle", "")
        with self._lock:
            self._open()
            sb = self._held.get(hid)
            if sb is None:
                raise NotFoundError(f"no sandbox {hid!r} is held in this session (released, expired, or never acquired)")
            if sb.client != msg.get("clientId"):
                raise ForeignHandleError(f"sandbox {hid} is held by another client", "permission_denied", "foreign")
        if alive and sb.lost:
            raise SandboxLostError(f"sandbox {hid} was lost: {sb.lost}", "aborted", "lost")
        return sb

    def _Release(self, msg: dict[str, Any]) -> dict[str, Any]:
        reuse = bool(msg.get("reuse"))
        if reuse and not self.recycle:
            raise InvalidArgumentError("this session does not recycle sandboxes: start serve with --recycle "
                                       "(FakeFleet(recycle=True)) to release with reuse")
        sb = self._held_by(msg, alive=False)
        with self._lock:
            del self._held[sb.id]
            self.counts["released"] += 1
        if not reuse or sb.lost:
            sb.delete()
            return {"outcome": "released"}
        if sb.resets >= self.max_reuses:
            sb.delete()
            return {"outcome": "rotated"}
        sb.reset()
        sb.resets += 1
        with self._lock:
            self._clean.setdefault(sb.image, []).append(sb)
        return {"outcome": "reset"}

    def _Renew(self, msg: dict[str, Any]) -> dict[str, Any]:
        client = msg.get("clientId")
        if not client:
            raise InvalidArgumentError("a client id is required")
        with self._lock:
            self._open()
            return {"handles": sum(sb.client == client for sb in self._held.values()), "leaseTtl": "60s"}

    def _Status(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            counts = {k: str(v) for k, v in self.counts.items() if v}
            return {"runId": self.run_id, "namespace": "fake", "tasks": len(self._tasks),
                    "pools": [self._pool(i) for i in sorted(self._images)],
                    "handles": [sb.wire() for sb in self._held.values()], "counts": counts, "leaseTtl": "60s",
                    "warmTtl": "600s"}

    def _Close(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._owner and msg.get("clientId") != self._owner:
                raise ForeignHandleError("only the client that opened the session may close it", "permission_denied", "foreign")
        self.shutdown()
        return {}

    def shutdown(self) -> None:
        """Ends every sandbox and closes the session, as serve's end does."""
        with self._lock:
            self._closed = True
            sandboxes = list(self._held.values()) + [sb for c in self._clean.values() for sb in c]
            self._held.clear()
            self._clean.clear()
        for sb in sandboxes:
            sb.delete()

    # Sandboxes.

    def _Alive(self, msg: dict[str, Any]) -> dict[str, Any]:
        sb = self._held_by(msg, alive=False)
        return {"reason": sb.lost} if sb.lost else {"alive": True}

    def _argv(self, msg: dict[str, Any]) -> list[str]:
        argv = list(msg.get("argv") or [])
        if not argv:
            raise InvalidArgumentError("no command: argv is empty")
        self._container(msg)
        return argv

    @staticmethod
    def _container(msg: dict[str, Any]) -> None:
        container = msg.get("container")
        if container and container != CONTAINER:
            raise InvalidArgumentError(f"container {container!r} is not in sandbox {msg.get('handle')}: "
                                       f"a fake sandbox has one container, {CONTAINER!r}")

    def _Exec(self, msg: dict[str, Any]) -> Stream:
        sb = self._held_by(msg)
        argv = self._argv(msg)
        with self._lock:
            self.counts["execs"] += 1
        stdin = unb64(msg["stdin"]) if "stdin" in msg else None
        return sb.exec(argv, stdin, _seconds(msg.get("timeout")), msg.get("env"), msg.get("cwd"))

    def _OpenShell(self, msg: dict[str, Any]) -> dict[str, Any]:
        sb = self._held_by(msg)
        self._container(msg)
        name = msg.get("shell") or "default"
        with self._lock:
            if name not in sb.shells or sb.shells[name].closed:
                sb.shells[name] = Shell(sb, name)
        return {}

    def _shell(self, msg: dict[str, Any]) -> tuple[Sandbox, Shell]:
        sb = self._held_by(msg)
        name = msg.get("shell") or "default"
        sh = sb.shells.get(name)
        if sh is None or sh.closed:
            raise NotFoundError(f"sandbox {sb.id} has no shell {name!r} open (closed, exited, or never opened): open it first")
        return sb, sh

    def _ShellRun(self, msg: dict[str, Any]) -> Stream:
        sb, sh = self._shell(msg)
        return self._checked(sb, sh.run(msg.get("script", ""), _seconds(msg.get("timeout")), bool(msg.get("mergeStderr"))))

    def _checked(self, sb: Sandbox, messages: Stream) -> Stream:
        yield from messages
        sb.check_alive()

    def _ShellInterrupt(self, msg: dict[str, Any]) -> dict[str, Any]:
        _, sh = self._shell(msg)
        if sh.running:
            sh.signal_children(signal.SIGINT)
        return {}

    def _CloseShell(self, msg: dict[str, Any]) -> dict[str, Any]:
        sb = self._held_by(msg)
        sh = sb.shells.pop(msg.get("shell") or "default", None)
        if sh is not None:
            sh.close()
        return {}

    def _Start(self, msg: dict[str, Any]) -> dict[str, Any]:
        sb = self._held_by(msg)
        p = sb.command(self._argv(msg), msg.get("env"), msg.get("cwd"))
        with self._lock:
            pid = f"p{len(sb.procs) + 1}"
            sb.procs[pid] = Proc(sb, pid, p)
        return {"process": pid}

    def _proc(self, msg: dict[str, Any], alive: bool = True) -> Proc:
        sb = self._held_by(msg, alive)
        proc = sb.procs.get(msg.get("process", ""))
        if proc is None:
            raise NotFoundError(f"sandbox {sb.id} has no process {msg.get('process')!r}")
        return proc

    def _ProcessEvents(self, msg: dict[str, Any]) -> Stream:
        return self._proc(msg, alive=False).stream(int(msg.get("from") or 0))

    def _WriteStdin(self, msg: dict[str, Any]) -> dict[str, Any]:
        self._proc(msg).write(unb64(msg.get("data")), bool(msg.get("close")))
        return {}

    def _Signal(self, msg: dict[str, Any]) -> dict[str, Any]:
        proc = self._proc(msg)
        name = str(msg.get("signal", "")).upper()
        try:
            sig = signal.Signals[name if name.startswith("SIG") else "SIG" + name]
        except KeyError:
            raise InvalidArgumentError(f"signal {msg.get('signal')!r}: give a signal's name, such as SIGTERM") from None
        proc.signal(sig)
        return {}

    def _Wait(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self._proc(msg, alive=False).wait(_seconds(msg.get("timeout")))

    def _PortForward(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The fake's sandbox is this machine: its port is here already."""
        sb = self._held_by(msg)
        port = int(msg.get("port") or 0)
        if not 1 <= port <= 65535:
            raise InvalidArgumentError(f"port {port}: give a port from 1 to 65535")
        forward = uuid.uuid4().hex[:8]
        sb.forwards.add(forward)
        return {"address": f"127.0.0.1:{port}", "forward": forward}

    def _ClosePortForward(self, msg: dict[str, Any]) -> dict[str, Any]:
        self._held_by(msg, alive=False).forwards.discard(msg.get("forward", ""))
        return {}

    def _WriteFiles(self, first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> dict[str, Any]:
        """Unpacks the streamed archive with the sandbox's tar, as serve does."""
        sb = self._held_by(first)
        directory = first.get("directory", "")
        if not directory.startswith("/"):
            raise InvalidArgumentError(f"directory {directory!r}: give an absolute path")
        return {"bytes": str(sb.untar(directory, (unb64(m.get("tar")) for m in [first, *rest])))}

    def _ReadFiles(self, msg: dict[str, Any]) -> Stream:
        """Streams a tar archive of the paths, made by the sandbox's tar."""
        sb = self._held_by(msg)
        rel = [p.lstrip("/") or "." for p in msg.get("paths") or []]
        if not rel:
            raise InvalidArgumentError("no paths to read")
        return sb.tar(rel)


def _unimplemented(method: str) -> FleetError:
    return FleetError(f"FakeSession does not serve {method}", "unimplemented")


_warned_no_plugin = False


def _plan(plugin: str | None, plan_args: Sequence[str], tasks: list[dict[str, Any]], strategy: str,
          concurrency: int) -> tuple[list[dict[str, list[str]]], int, dict[str, int]]:
    """The windows (images warm together, in run order, each with what to
    warm before it and let go after it, as the wire has them), the
    concurrency and each image's pool depth of a run, by the kubectl
    plugin's planner as serve plans them. Without the plugin: one window of
    every image, warmed first, one task at a time unless concurrency says
    otherwise, and the strategy not checked, said once."""
    global _warned_no_plugin
    images = list(dict.fromkeys(t["image"] for t in tasks))
    try:
        found: str | None = find_plugin(plugin)
    except PluginError:
        found = None
    if found is None:
        if not _warned_no_plugin:
            _warned_no_plugin = True
            warnings.warn("FakeFleet plans runs as one window of every image, whatever the strategy: the kubectl plugin "
                          "(kubectl-sandbox_fleet), whose planner serve uses, is not on PATH; install it "
                          "(kubectl krew install sandbox-fleet), or name it with plugin= or $SANDBOX_FLEET_PLUGIN, "
                          "for the session's own windows",
                          RuntimeWarning, stacklevel=6)
        return [{"images": images, "warm": images, "letGo": []}], concurrency or 1, {}
    rows = "".join(json.dumps({"id": t["id"], "image": t["image"]}) + "\n" for t in tasks)
    argv = [found, "plan", "--offline", "--tasks", "-", "-o", "json", "--strategy", strategy, *plan_args]
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    p = subprocess.run(argv, input=rows.encode(), capture_output=True, timeout=120)
    if p.returncode != 0:
        raise InvalidArgumentError(f"{' '.join(argv[1:])}: {p.stderr.decode(errors='replace').strip()}")
    plan = json.loads(p.stdout)
    windows = [{"images": list(w["images"]), "warm": list(w.get("warm") or []), "letGo": list(w.get("letGo") or [])}
               for w in plan.get("windows") or []]
    return windows, int(plan.get("concurrency") or 1), {pp["image"]: int(pp["replicas"]) for pp in plan.get("pools") or []}


class FakeTransport:
    """Hands a client's calls to a FakeSession in place of HTTP: messages
    go in and come out as JSON objects, and errors as serve's (the
    session's exception is made again from its code, reason and the
    method's name, as the HTTP transport makes it)."""

    def __init__(self, session: FakeSession):
        self.session = session
        self.address = "fake://" + session.run_id
        self.key = uuid.uuid4().hex

    def unary(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        try:
            return _wire(self.session.unary(method, _wire(msg), self.key))
        except FleetError as e:
            raise _as_sent(method, e) from None

    def server_stream(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> Stream:
        try:
            messages = self.session.server_stream(method, _wire(msg), self.key)
            try:
                for m in messages:
                    yield _wire(m)
            finally:
                close = getattr(messages, "close", None)
                if close is not None:
                    close()
        except FleetError as e:
            raise _as_sent(method, e) from None

    def client_stream(self, method: str, msgs: Iterable[dict[str, Any]], timeout: float | None = None) -> dict[str, Any]:
        try:
            return _wire(self.session.client_stream(method, (_wire(m) for m in msgs), self.key))
        except FleetError as e:
            raise _as_sent(method, e) from None

    def close(self) -> None:
        pass

    def asyncio(self) -> "AsyncFakeTransport":
        return AsyncFakeTransport(self)


class AsyncFakeTransport:
    """FakeTransport for asyncio: each call runs in a thread, as a command
    in the sandbox blocks; a stream's messages come as they are made, and
    closing it (aclose) stops the call."""

    def __init__(self, sync: FakeTransport):
        self.sync = sync
        # Threads of its own: calls that wait (a process's events, a Wait)
        # must not starve the ones they wait for of the loop's few.
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=256, thread_name_prefix="sandbox-fleet-fake")

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    async def unary(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = await self._call(self.sync.unary, method, msg, timeout)
        return out

    async def server_stream(self, method: str, msg: dict[str, Any]) -> AsyncStream:
        messages = self.sync.server_stream(method, msg)
        done: dict[str, Any] = {}
        pulling: concurrent.futures.Future[Any] | None = None

        def pull() -> Any:
            return next(messages, done)

        try:
            while True:
                pulling = self._threads.submit(pull)
                m = await asyncio.wrap_future(pulling)
                if m is done:
                    return
                yield m
        finally:
            # A reader cancelled while a message was being made leaves its
            # thread in the stream; the stream is closed (the command
            # stopped) once that thread is out of it.
            if pulling is not None and not pulling.done():
                pulling.add_done_callback(lambda _: self._threads.submit(messages.close))
            else:
                await self._call(messages.close)

    async def client_stream(self, method: str, msgs: Iterable[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = await self._call(self.sync.client_stream, method, list(msgs))
        return out

    async def close(self) -> None:
        """Nothing to close: calls after it reach the session, which says
        it is closed, as a closed serve's address answers nothing."""


def _wire(m: dict[str, Any]) -> dict[str, Any]:
    """m as it crosses the wire: a JSON object, made anew (the handlers
    write serve's messages, zero values left out where protobuf leaves
    them out)."""
    out = json.loads(json.dumps(m))
    assert isinstance(out, dict)
    return out


def _as_sent(method: str, e: FleetError) -> FleetError:
    """The error the client's HTTP transport would raise for e."""
    meta = {"sandbox-fleet-verdict": e.verdict or "", "sandbox-fleet-reason": e.reason or ""}
    return from_connect(e.code, f"{method}: {e}", {k: v for k, v in meta.items() if v})


class _Controls:
    """The fake's controls, on FakeFleet and AsyncFakeFleet alike."""

    session: FakeSession

    def lose(self, handle: Handle | AsyncHandle | str, reason: str = "its Pod was deleted (FakeFleet.lose)") -> None:
        """Makes a held sandbox lost (FakeSession.lose)."""
        self.session.lose(_id(handle), reason)

    def fail_start(self, task_or_image: str | Mapping[str, Any], times: int = 1,
                   reason: str = "the image could not be pulled (FakeFleet.fail_start)") -> None:
        """Makes the next acquires of a task or image fail (FakeSession.fail_start)."""
        self.session.fail_start(task_or_image, times, reason)

    def root_of(self, handle: Handle | AsyncHandle | str) -> str:
        """The local directory that is the sandbox's root."""
        return self.session.root_of(_id(handle))


class FakeFleet(_Controls, SandboxFleet):
    """SandboxFleet with no cluster: the real client over a FakeSession of
    its own (``FakeFleet()`` needs no argument; the keywords are
    FakeSession's), or over ``session`` shared with other fake clients. The
    fake's controls — ``lose``, ``fail_start``, ``root_of`` — are here as
    well as on ``self.session``."""

    def __init__(self, client_id: str | None = None, *, session: FakeSession | None = None, **session_options: Any):
        self.session = session or FakeSession(**session_options)
        super().__init__(transport=FakeTransport(self.session), client_id=client_id)

    def close(self) -> None:
        """Closes the session: its sandboxes' processes end and their
        directories are deleted."""
        self.disconnect()
        if not self.session._closed:
            super().close()


class AsyncFakeFleet(_Controls, AsyncSandboxFleet):
    """AsyncSandboxFleet with no cluster, as FakeFleet."""

    def __init__(self, client_id: str | None = None, *, session: FakeSession | None = None, **session_options: Any):
        self.session = session or FakeSession(**session_options)
        super().__init__(transport=FakeTransport(self.session), client_id=client_id)

    async def close(self) -> None:
        self.disconnect()
        if not self.session._closed:
            await super().close()


def _id(handle: Handle | AsyncHandle | str) -> str:
    if isinstance(handle, AsyncHandle):
        return handle.handle.id
    return handle if isinstance(handle, str) else handle.id


__all__ = ["AsyncFakeFleet", "AsyncFakeTransport", "FakeFleet", "FakeSession", "FakeTransport"]
