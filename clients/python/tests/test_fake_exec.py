"""Exec and files on FakeFleet (the real node's are in test_real_node.py)."""

import json
import os
import shutil
import subprocess
import time

import pytest

import adapter_checks
import agent_checks
from sandbox_fleet import FleetError, InvalidArgumentError, NotFoundError, SandboxLostError, SandboxStartError, TaskError
from conftest import fake_fleet
from sandbox_fleet.testing import FakeFleet


@pytest.fixture(params=["fake", "fake-async"])
def fleet(request):
    """FakeFleet and AsyncFakeFleet: the same bodies run on both."""
    with fake_fleet(request.param == "fake-async") as f:
        yield f


@pytest.fixture
def handle(fleet):
    fleet.add_tasks([{"id": "t", "image": "busybox:1.36"}])
    return fleet.acquire("t")


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


def test_shells(fleet, handle):
    agent_checks.shells_keep_state(handle, os.path.join(fleet.root_of(handle), "testbed"))


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


def test_miniswe_environment(fleet, handle):
    os.makedirs(os.path.join(fleet.root_of(handle), "testbed"))
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


def test_recycling_resets_a_sandbox_to_its_image():
    """serve --recycle, faked: a release with reuse ends what ran in the
    sandbox and gives the next acquire of its image the sandbox with its
    image's files, max_reuses times; then it is rotated out."""
    for asynchronous in (False, True):
        with fake_fleet(asynchronous, recycle=True, max_reuses=2) as fleet:
            fleet.add_tasks([{"id": f"t{i}", "image": "busybox:1.36"} for i in range(4)])
            h = fleet.acquire("t0")
            first = h.id
            h.write_file("/testbed/left.txt", "by t0")
            h.start("sleep 0.5; echo late > /tmp/late.txt")
            assert h.release(reuse=True) == "reset"
            for n in (1, 2):
                h = fleet.acquire(f"t{n}")
                assert (h.id, h.resets, h.task_id) == (first, n, f"t{n}")
                assert not h.exists("/testbed/left.txt") and h.exists("/tmp")
                # What ran in it before its reset ended with it.
                time.sleep(1)
                assert not h.exists("/tmp/late.txt")
                h.write_file("/testbed/left.txt", "again")
                assert fleet.release(h, reuse=True) == ("reset" if n == 1 else "rotated")
            h = fleet.acquire("t3")
            assert h.id != first and h.resets == 0 and not h.exists("/testbed/left.txt")
            fleet.release(h)
            assert fleet.status().counts.reused == 2
            results = fleet.run(lambda task, h: h.resets, recycle=True, concurrency=1)
            assert [r.value for r in results] == [0, 1, 2, 0], results


def test_what_the_fake_refuses_as_serve_does(fleet, handle):
    with pytest.raises(InvalidArgumentError) as e:
        handle.exec("true", container="sidecar")
    assert "'sandbox'" in str(e.value)
    with pytest.raises(InvalidArgumentError, match="'sidecar' is not in sandbox"):
        handle.shell("s", container="sidecar")
    handle.shell("s", container="sandbox").close()
    with pytest.raises(InvalidArgumentError) as e:
        handle.release(reuse=True)
    assert "--recycle" in str(e.value)
    with pytest.raises(InvalidArgumentError):
        handle.exec([])
    handle.release()
    with pytest.raises(NotFoundError):
        handle.exec("true")


def test_runs_are_planned_by_the_plugin_as_serve_plans_them(tmp_path, monkeypatch):
    """The windows of a fake run are the plugin's planner's, with the
    flags serve would be given; without the plugin the fake says so once
    and plans one window."""
    from conftest import BIN
    from sandbox_fleet import testing

    rows = [{"id": f"t{i}", "image": f"registry.example/swe/{i % 3}:1"} for i in range(6)]
    plugin = BIN or shutil.which("kubectl-sandbox_fleet")
    if plugin:
        fleet = FakeFleet(isolate=True, plugin=plugin, plan_args=["--window-size", "2"])
        fleet.add_tasks(rows)
        plan = fleet._plan_run("sliding", 2)
        want = subprocess.run([plugin, "plan", "--offline", "--tasks", "-", "-o", "json", "--strategy", "sliding",
                               "--window-size", "2", "--concurrency", "2"],
                              input="".join(json.dumps(r) + "\n" for r in rows), capture_output=True, text=True, check=True)
        assert [w["images"] for w in plan["windows"]] == [w["images"] for w in json.loads(want.stdout)["windows"]]
        assert [len(w["images"]) for w in plan["windows"]] == [2, 1], plan
        assert plan["windows"][0]["taskIds"] == ["t0", "t1", "t3", "t4"], plan
        fleet.close()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SANDBOX_FLEET_PLUGIN", raising=False)
    monkeypatch.setattr(testing, "_warned_no_plugin", False)
    fleet = FakeFleet(isolate=True)
    fleet.add_tasks(rows)
    with pytest.warns(RuntimeWarning, match="kubectl plugin"):
        plan = fleet._plan_run("sliding", 0)
    assert len(plan["windows"]) == 1 and plan["concurrency"] == 1, plan
    fleet.close()
