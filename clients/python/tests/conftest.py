"""Fixtures: a FakeFleet, and `kubectl sandbox-fleet serve` sessions on the
local test cluster. The Go test clients/python/python_test.go starts the
cluster and sets SANDBOX_FLEET_BIN, KUBECONFIG and SANDBOX_FLEET_NAMESPACE;
without them only the FakeFleet tests run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time

import pytest

from blocking import Blocking, Loop
from sandbox_fleet import SandboxFleet
from sandbox_fleet.testing import AsyncFakeFleet, FakeFleet

BIN = os.environ.get("SANDBOX_FLEET_BIN")
KUBECTL = os.environ.get("SANDBOX_FLEET_KUBECTL", "kubectl")
NAMESPACE = os.environ.get("SANDBOX_FLEET_NAMESPACE")

needs_cluster = pytest.mark.skipif(not (BIN and NAMESPACE), reason="needs the local test cluster (run through go test ./clients/python)")

# The serve flags the sessions of these tests plan with, which the fakes
# plan with too (by the plugin's planner).
PLAN_ARGS = ["--max-concurrent", "4", "--max-warmpool-size", "2"]

RUN_KINDS = "sandboxclaims,sandboxwarmpools,sandboxtemplates,sandboxes,pods,leases,configmaps"


def leftovers(run_id: str) -> list[str]:
    """What of run_id is still in the cluster."""
    out = subprocess.run([KUBECTL, "get", RUN_KINDS, "-n", NAMESPACE, "-l", f"sandbox-fleet.io/run-id={run_id}",
                          "-o", "name"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def _die_with_parent() -> None:
    """Has the kernel kill this child when pytest dies, however it dies:
    a serve left behind would outlive its test cluster."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Server:
    """One `serve` process and its session."""

    def __init__(self, *args: str, lease_ttl: str = "60s", warm_ttl: str = "10m", resume: Server | None = None,
                 named: bool = False):
        """A new session; with resume, that server's session at its
        address, taken over by --resume or, named, by --session-name."""
        self.dir = resume.dir if resume else tempfile.mkdtemp(prefix="sf-serve-")
        self.run_id = resume.run_id if resume else "py-" + os.urandom(4).hex()
        ttls = ["--lease-ttl", lease_ttl, "--warm-ttl", warm_ttl]
        if named:
            session = ["--session-name", self.run_id, "--detach-on-signal", *ttls]
        elif resume:
            session = ["--resume", self.run_id]
        else:
            session = ["--run-id", self.run_id, *ttls]
        self.log = open(os.path.join(self.dir, f"serve-{len(os.listdir(self.dir))}.log"), "w+")
        self.proc = subprocess.Popen(
            [BIN, "serve", "-n", NAMESPACE, "--listen", f"unix://{self.dir}/serve.sock", *session,
             *PLAN_ARGS, *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True, preexec_fn=_die_with_parent)
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            self.proc.wait(30)
            raise RuntimeError(f"serve did not start: {self.logs()}")

    def logs(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def client(self, **kw) -> SandboxFleet:
        return SandboxFleet(self.address, **kw)

    def stop(self, sig=signal.SIGTERM, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)


@pytest.fixture
def server():
    servers = []

    def start(*args, **kw) -> Server:
        s = Server(*args, **kw)
        servers.append(s)
        return s

    yield start
    # The last first: a resumed session is its killed server's too.
    for s in reversed(servers):
        code = s.stop()
        assert code == 0 or s.proc.returncode is not None, s.logs()
        # The garbage collector finishes a foreground deletion of a
        # template after the session saw its Pods go.
        gone(s)


def gone(s: Server) -> None:
    """Waits until nothing of s's run is left in the cluster."""
    run_gone(s.run_id, s.logs)


def run_gone(run_id: str, logs=lambda: "", timeout: float = 60) -> None:
    """Waits until nothing of run_id is left in the cluster."""
    try:
        wait_for(f"session {run_id}'s objects to go", lambda: leftovers(run_id) == [], timeout=timeout)
    except AssertionError:
        raise AssertionError(f"session {run_id} left {leftovers(run_id)} behind:\n{logs()}") from None


@contextlib.contextmanager
def fake_fleet(asynchronous: bool, **options):
    """A FakeFleet, or an AsyncFakeFleet seen through blocking calls (the
    same test body runs on both), planning runs as the tests' serves do,
    closed at the end."""
    options = {"isolate": True, "plugin": BIN, "plan_args": PLAN_ARGS, **options}
    if not asynchronous:
        f = FakeFleet(**options)
        try:
            yield f
        finally:
            f.close()
        return
    loop = Loop()
    af = AsyncFakeFleet(**options)
    try:
        yield Blocking(af, loop)
    finally:
        loop.run(af.close())
        loop.stop()


@pytest.fixture(params=["fake", "fake-async", "serve"])
def fleet(request, server):
    """The same interface, as FakeFleet and AsyncFakeFleet (the real
    clients over the fake transport), and through serve."""
    if request.param.startswith("fake"):
        with fake_fleet(request.param == "fake-async") as f:
            yield f
        return
    if not (BIN and NAMESPACE):
        pytest.skip("needs the local test cluster")
    yield server().client()


def wait_for(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
