"""Exec and files on FakeFleet (the real node's are in test_real_node.py)."""

import os

import pytest

import adapter_checks
import agent_checks
from sandbox_fleet import FleetError, SandboxLostError, SandboxStartError, TaskError
from sandbox_fleet.testing import FakeFleet


@pytest.fixture
def handle():
    f = FakeFleet(isolate=True)
    f.add_tasks([{"id": "t", "image": "busybox:1.36"}])
    h = f.acquire("t")
    yield h
    f.close()


def test_exec(handle):
    r = handle.exec(["sh", "-c", "printf out; printf err >&2; exit 3"])
    assert (r.exit_code, r.stdout, r.stderr) == (3, b"out", b"err")
    assert handle.exec(["cat"], stdin=b"\x00\xff").stdout == b"\x00\xff"
    with pytest.raises(TaskError) as e:
        handle.exec(["false"], check=True)
    assert e.value.exit_code == 1 and e.value.verdict == "task"
    assert handle.exec(["sh", "-c", "echo $X"], env={"X": "y"}).stdout == b"y\n"


def test_files_round_trip(handle):
    data = os.urandom(20 << 20)
    handle.write_file("/testbed/big.bin", data)
    assert handle.read_file("/testbed/big.bin") == data
    handle.write_files("/out", {"a.txt": "A", "d/b.txt": b"B"})
    assert handle.read_files(["/out"]) == {"/out/a.txt": b"A", "/out/d/b.txt": b"B"}


def test_timeouts_kill(handle):
    agent_checks.timeouts_kill(handle)


def test_shells(handle):
    agent_checks.shells_keep_state(handle, os.path.join(handle.root, "testbed"))


def test_processes(handle):
    agent_checks.processes(handle)


def test_port_forward(handle):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent_checks.port_forward(handle, port)


def test_files(handle, tmp_path):
    agent_checks.files(handle, tmp_path)


def test_output_caps(handle, tmp_path):
    agent_checks.output_caps(handle, tmp_path)


def test_miniswe_environment(handle):
    os.makedirs(os.path.join(handle.root, "testbed"))
    adapter_checks.miniswe(handle, "/testbed")


@pytest.mark.parametrize("episode", ["miniswe", "swerex", "r2egym", "r2egym_repo_env"])
def test_framework_episodes(handle, episode, tmp_path):
    adapter_checks.seed_testbed(handle)
    run = getattr(adapter_checks, episode + "_episode")
    assert (run(handle, tmp_path) if episode == "swerex" else run(handle)) == 1.0


def test_injected_failures():
    f = FakeFleet(isolate=True)
    f.add_tasks([{"id": "a", "image": "busybox:1.36"}, {"id": "b", "image": "busybox:1.36"}])
    f.fail_start("a")
    with pytest.raises(SandboxStartError):
        f.acquire("a")
    h = f.acquire("a")
    p = h.start(["sleep", "60"])
    assert h.is_alive()
    f.lose(h)
    assert not h.is_alive() and "deleted" in h.alive_reason()
    assert p.wait(5) == 137
    with pytest.raises(SandboxLostError):
        h.exec(["true"])
    f.release(h)
    f.close()


def test_wait_pools_ready_says_what_is_not_warming():
    f = FakeFleet(isolate=True)
    f.add_tasks([{"id": "a", "image": "busybox:1.36"}])
    with pytest.raises(FleetError) as e:
        f.wait_pools_ready(timeout=60)
    assert e.value.code == "failed_precondition" and "lookahead" in str(e.value)
