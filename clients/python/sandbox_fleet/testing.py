"""FakeFleet: the SandboxFleet interface with no cluster, for trainers' unit
tests. A sandbox is a local temporary directory standing for the sandbox's
root (``/testbed/x`` is ``<dir>/testbed/x``), and exec runs a local process
in it. It checks what the real session checks: unknown tasks, images not in
the plan, handles released twice or held by another fleet."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping

from .client import Handle
from .errors import FleetError


class FakeHandle(Handle):
    """A sandbox of FakeFleet: a local directory."""

    root: str = ""

    def _local(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def exec_stream(self, argv, stdin=None, timeout=None, env=None, cwd=None, container=None) -> Iterator[tuple[str, bytes | int]]:
        self.fleet._check(self.id)
        if not argv:
            raise FleetError("Exec: no command: argv is empty", "invalid_argument")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        try:
            p = subprocess.run(list(argv), input=data if data is not None else b"", capture_output=True,
                               timeout=timeout, cwd=self._local(cwd) if cwd else self.root,
                               env={**os.environ, "SANDBOX_ROOT": self.root, **(env or {})})
        except FileNotFoundError as e:
            yield "stderr", str(e).encode()
            yield "exit", 127
            return
        if p.stdout:
            yield "stdout", p.stdout
        if p.stderr:
            yield "stderr", p.stderr
        yield "exit", p.returncode

    def write_tar(self, directory: str, archive: bytes, chunk: int = 1 << 20) -> int:
        self.fleet._check(self.id)
        if not directory.startswith("/"):
            raise FleetError(f"WriteFiles: directory {directory!r}: give an absolute path", "invalid_argument")
        dest = self._local(directory)
        os.makedirs(dest, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for m in tar.getmembers():
                # What a sandbox's own tar could write is inside the
                # sandbox; here that is the directory.
                target = os.path.realpath(os.path.join(dest, m.name))
                if not target.startswith(os.path.realpath(self.root) + os.sep) or m.issym() or m.islnk():
                    raise FleetError(f"WriteFiles: {m.name!r} would land outside the sandbox", "invalid_argument")
            tar.extractall(dest)
        return len(archive)

    def read_tar(self, paths: Iterable[str]) -> bytes:
        self.fleet._check(self.id)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for p in paths:
                local = self._local(p)
                if not os.path.exists(local):
                    raise FleetError(f"ReadFiles: tar: {p}: No such file or directory", "failed_precondition")
                tar.add(local, arcname=p.lstrip("/"))
        return buf.getvalue()


class FakeFleet:
    """SandboxFleet with no cluster. ``FakeFleet()`` needs no argument."""

    def __init__(self, client_id: str | None = None):
        self.client_id = client_id or "fake-" + uuid.uuid4().hex[:8]
        self._tasks: dict[str, dict] = {}
        self._images: dict[str, int] = {}
        self._warm: set[str] = set()
        self._held: dict[str, FakeHandle] = {}
        self._requests = 0
        self._lock = threading.Lock()
        self._closed = False
        self.counts = {"acquired": 0, "released": 0}

    def _open(self) -> None:
        if self._closed:
            raise FleetError("the session is closed", "failed_precondition")

    def _check(self, hid: str) -> None:
        with self._lock:
            self._open()
            if hid not in self._held:
                raise FleetError(f"no sandbox {hid!r} is held in this session (released, expired, or never acquired)", "not_found")

    def add_tasks(self, tasks: Iterable[Mapping]) -> dict:
        self._open()
        new = []
        for i, t in enumerate(tasks):
            if "id" not in t or "image" not in t:
                raise ValueError(f"task {dict(t)!r}: a task needs an 'id' and an 'image'")
            tid = str(t["id"])
            if tid in self._tasks or any(tid == n["id"] for n in new):
                raise FleetError(f"AddTasks, task {i + 1}: duplicate task id {tid!r}", "invalid_argument")
            new.append({**t, "id": tid})
        for t in new:
            self._tasks[t["id"]] = t
            self._images[t["image"]] = self._images.get(t["image"], 0) + 1
        return {"added": len(new), "total": len(self._tasks), "pools": []}

    def _image_of(self, x) -> str:
        if isinstance(x, Mapping):
            x = str(x["id"])
        if x in self._tasks:
            return self._tasks[x]["image"]
        if x in self._images:
            return x
        raise FleetError(f"no task or image {x!r} in this session: add it with add_tasks first", "not_found")

    def lookahead(self, tasks_or_images: Iterable) -> list[dict]:
        self._open()
        images = {self._image_of(x) for x in tasks_or_images}
        self._warm |= images
        return [self._pool(i) for i in sorted(images)]

    def _pool(self, image: str) -> dict:
        n = self._images[image]
        return {"image": image, "desired": n, "ready": n if image in self._warm else 0, "warm": image in self._warm}

    def wait_pools_ready(self, timeout: float = 600.0, images: Iterable[str] = ()) -> dict:
        self._open()
        names = list(images) or sorted(self._warm)
        return {"ready": all(i in self._warm for i in names), "pools": [self._pool(i) for i in names]}

    def acquire(self, task_id=None, image: str | None = None, timeout: float | None = None) -> FakeHandle:
        self._open()
        if (task_id is None) == (image is None):
            raise FleetError("name either a task id or an image", "invalid_argument")
        img = self._image_of(task_id if task_id is not None else image)
        tid = str(task_id["id"] if isinstance(task_id, Mapping) else task_id or "")
        self._warm.add(img)
        with self._lock:
            self._requests += 1
            hid = f"fake-{self._requests}"
        root = tempfile.mkdtemp(prefix="sandbox-fleet-fake-")
        h = FakeHandle(fleet=self, id=hid, task_id=tid, image=img, cluster="fake", namespace="fake", claim=hid,
                       sandbox=hid, pod=hid, pod_ip="127.0.0.1", hostname=hid, node="localhost", container="sandbox")
        h.root = root
        with self._lock:
            self._held[hid] = h
            self.counts["acquired"] += 1
        return h

    def release(self, handle, reuse: bool = False) -> str:
        """Deletes the sandbox's directory. The fake does not recycle: with
        reuse too the sandbox is deleted, and the outcome is "released"."""
        hid = handle.id if isinstance(handle, Handle) else handle
        self._check(hid)
        with self._lock:
            h = self._held.pop(hid)
            self.counts["released"] += 1
        shutil.rmtree(h.root, ignore_errors=True)
        return "released"

    def status(self) -> dict:
        return {"tasks": len(self._tasks), "pools": [self._pool(i) for i in sorted(self._images)],
                "handles": [{"id": h.id, "taskId": h.task_id, "image": h.image} for h in self._held.values()],
                "counts": dict(self.counts)}

    def close(self) -> None:
        for hid in list(self._held):
            self.release(hid)
        self._closed = True

    def disconnect(self) -> None:
        pass
