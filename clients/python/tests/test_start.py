"""A session the client starts itself (sandbox_fleet.start): serve as the
trainer's child, gone with the session or with the trainer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import sandbox_fleet
from conftest import BIN, NAMESPACE, PLAN_ARGS, needs_cluster, run_gone, wait_for
from sandbox_fleet import PluginError

TASKS = [{"id": f"t{i}", "image": "registry.example/swe/start:1"} for i in range(2)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone too: only its parent's wait is left.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_no_plugin_is_one_line_saying_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SANDBOX_FLEET_PLUGIN", raising=False)
    with pytest.raises(PluginError) as e:
        sandbox_fleet.start(namespace="x")
    msg = str(e.value)
    assert "\n" not in msg and "kubectl-sandbox_fleet is not on PATH" in msg and "krew install sandbox-fleet" in msg, msg
    monkeypatch.setenv("SANDBOX_FLEET_PLUGIN", str(tmp_path / "nope"))
    with pytest.raises(PluginError, match="SANDBOX_FLEET_PLUGIN names"):
        sandbox_fleet.start(namespace="x")


@needs_cluster
def test_a_config_field_serve_refuses_is_named():
    with pytest.raises(PluginError) as e:
        sandbox_fleet.start({"maxConcurent": 2}, namespace=NAMESPACE, plugin=BIN)
    assert "maxConcurent" in str(e.value), e.value


@needs_cluster
def test_the_session_and_serve_end_with_the_fleet():
    with sandbox_fleet.start({"maxConcurrent": 2}, namespace=NAMESPACE, plugin=BIN, tasks=TASKS, args=PLAN_ARGS) as fleet:
        serve = fleet._serve
        run_id = fleet.status().run_id
        assert fleet.status().tasks == 2
        with fleet.acquire("t0") as h:
            assert h.task_id == "t0" and h.pod
        directory = serve.dir
    assert serve.proc.returncode == 0, serve.proc.returncode
    assert not os.path.exists(directory)
    run_gone(run_id)


TRAINER = """
import sys
import sandbox_fleet
fleet = sandbox_fleet.start(namespace=sys.argv[1], plugin=sys.argv[2], tasks=[{"id": "t", "image": "registry.example/swe/killed:1"}])
h = fleet.acquire("t")
print(fleet._serve.proc.pid, fleet.status().run_id, flush=True)
sys.stdin.read()
"""


def _kill_and_check(script: str) -> None:
    """Runs a trainer (script, given the namespace and the plugin), which
    prints its serve's PID and run id once its session is under way;
    SIGKILLs it, and waits for its serve to end and its run's objects to go."""
    trainer = subprocess.Popen([sys.executable, "-P", "-c", script, NAMESPACE, BIN], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        line = trainer.stdout.readline().split()
        assert len(line) == 2, "the trainer did not start its session"
        pid, run_id = int(line[0]), line[1]
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(10)
        wait_for("serve to end with its trainer", lambda: _gone(pid), timeout=120)
        run_gone(run_id)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


@needs_cluster
def test_a_killed_trainer_takes_its_session_with_it():
    """SIGKILL leaves the trainer no say: serve gets SIGTERM from the kernel
    (its parent-death signal) and tears the session down."""
    _kill_and_check(TRAINER)


# The two rollouts run at once, in threads: one of them says, in one line,
# which serve and run to watch (two prints could interleave their words).
COMPAT_TRAINER = """
import sys, threading, time
from sandbox_fleet.rl import ClusterConfig, FleetConfig, SandboxFleet
fleet = SandboxFleet(FleetConfig(clusters=[ClusterConfig(name="c", namespace=sys.argv[1])], max_concurrent=2), plugin=sys.argv[2])
fleet.load_tasks([{"id": f"t{i}", "image": "registry.example/swe/killed-rl:1"} for i in range(2)])
first = threading.Lock()
def rollout(task, h):
    if first.acquire(blocking=False):
        native = fleet._session()
        sys.stdout.write(f"{native._serve.proc.pid} {native.status().run_id}\\n")
        sys.stdout.flush()
    time.sleep(600)
fleet.run(rollout, strategy="naive")
"""


@needs_cluster
def test_a_trainer_killed_mid_run_of_the_compatible_fleet_leaves_nothing():
    """agent-sandbox-rl's API, SIGKILLed in the middle of run(): its serve
    ends and takes the session's objects with it."""
    _kill_and_check(COMPAT_TRAINER)


@needs_cluster
def test_start_async():
    """start_async: the same session for asyncio, ended by async with."""
    import asyncio

    async def main():
        async with await sandbox_fleet.start_async(namespace=NAMESPACE, plugin=BIN, tasks=TASKS) as fleet:
            serve = fleet.sync._serve
            run_id = (await fleet.status()).run_id
            h = await fleet.acquire("t0")
            assert h.task_id == "t0"
            await fleet.release(h)
        return serve, run_id

    serve, run_id = asyncio.run(main())
    assert serve.proc.returncode == 0, serve.proc.returncode
    run_gone(run_id)
