"""Exec and files through `serve` on the local cluster's real node (kubelet,
containerd, images from the loopback registry). e2e/python_test.go runs it."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

import adapter_checks
import agent_checks
from conftest import KUBECTL, NAMESPACE, needs_cluster, wait_for

from sandbox_fleet import InfraError, SandboxLostError, SandboxStartError, TaskError

pytestmark = [needs_cluster, pytest.mark.skipif(not os.environ.get("SANDBOX_FLEET_REAL_NODE"), reason="needs the real node (run through go test ./e2e)")]

BUSYBOX = os.environ.get("SANDBOX_FLEET_BUSYBOX", "docker.io/library/busybox:1.36")
PROBLEM = os.environ.get("SANDBOX_FLEET_PROBLEM", "")


@pytest.fixture(scope="module")
def session():
    from conftest import Server, gone

    s = Server("--claim-grace", "10s")
    c = s.client()
    c.add_tasks([{"id": f"bb-{i}", "image": BUSYBOX} for i in range(3)] +
                [{"id": "swe", "image": PROBLEM}, {"id": "bad", "image": "docker.io/library/busybox:no-such-tag"}])
    c.lookahead(["bb-0", "swe"])
    assert c.wait_pools_ready(timeout=300, images=[BUSYBOX, PROBLEM]).ready
    yield c
    assert s.stop() == 0, s.logs()
    gone(s)


def test_exec_streams_stdin_and_exit_codes(session):
    with session.acquire("bb-0") as h:
        chunks = []
        started = time.monotonic()
        for kind, data in h.exec_stream(["sh", "-c", "echo first; sleep 2; echo second >&2; exit 7"]):
            chunks.append((kind, data, time.monotonic() - started))
        assert [(k, d) for k, d, _ in chunks] == [("stdout", b"first\n"), ("stderr", b"second\n"), ("exit", 7)]
        # The first line came as it was written, before the command ended.
        assert chunks[0][2] < chunks[-1][2] - 1, chunks

        assert h.exec(["cat"], stdin=b"\x00\x01binary\xff").stdout == b"\x00\x01binary\xff"
        for code in (0, 1, 42, 255):
            assert h.exec(["sh", "-c", f"exit {code}"]).exit_code == code
        assert h.exec(["sh", "-c", "printf no-newline"]).stdout == b"no-newline"
        r = h.exec(["sh", "-c", 'echo "$A $PWD"'], env={"A": "x y"}, cwd="/tmp")
        assert r.stdout == b"x y /tmp\n", r
        with pytest.raises(TaskError) as e:
            h.exec(["false"], check=True)
        assert e.value.verdict == "task" and e.value.exit_code == 1



def test_timeouts_kill(session):
    with session.acquire("bb-2") as h:
        agent_checks.timeouts_kill(h)


def test_shells_keep_state(session):
    with session.acquire("swe") as h:
        agent_checks.shells_keep_state(h, "/testbed")


def test_processes(session):
    with session.acquire("swe") as h:
        agent_checks.processes(h)


def test_async_streams_leave_the_loop_free(session):
    """An ``async for`` over a streaming exec beside 64 concurrent execs never
    stalls a 50 ms ticker for more than 200 ms: no call blocks the loop."""
    import asyncio

    from sandbox_fleet import AsyncSandboxFleet

    async def main():
        fleet = AsyncSandboxFleet(session._t.address)
        h = await fleet.acquire("bb-0")
        loop = asyncio.get_running_loop()
        stalls, stop = [], asyncio.Event()

        async def ticker():
            last = loop.time()
            while not stop.is_set():
                await asyncio.sleep(0.05)
                now = loop.time()
                stalls.append(now - last - 0.05)
                last = now

        async def stream():
            return [(k, d) async for k, d in h.exec_stream(["sh", "-c", "for i in 1 2 3 4 5; do echo $i; sleep 0.3; done"])]

        tick = asyncio.create_task(ticker())
        streamed, *results = await asyncio.gather(stream(), *(h.exec(["echo", str(i)]) for i in range(64)))
        stop.set()
        await tick
        await h.release()
        assert b"".join(d for k, d in streamed if k == "stdout") == b"1\n2\n3\n4\n5\n" and streamed[-1] == ("exit", 0)
        assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(64)]
        assert max(stalls) < 0.2, max(stalls)

    asyncio.run(main())


def test_miniswe_environment(session):
    with session.acquire("swe") as h:
        adapter_checks.miniswe(h, "/testbed")


@pytest.mark.parametrize("episode", ["miniswe", "swerex", "r2egym", "r2egym_repo_env"])
def test_framework_episodes(session, episode, tmp_path):
    with session.acquire("swe") as h:
        run = getattr(adapter_checks, episode + "_episode")
        assert (run(h, tmp_path) if episode == "swerex" else run(h)) == 1.0


def test_files(session, tmp_path):
    with session.acquire("swe") as h:
        agent_checks.files(h, tmp_path)


def test_output_caps(session, tmp_path):
    with session.acquire("swe") as h:
        agent_checks.output_caps(h, tmp_path)


def test_port_forward(session):
    with session.acquire("swe") as h:
        agent_checks.port_forward(h, 8000)


def test_files_round_trip(session):
    data = os.urandom(20 << 20)
    with session.acquire("swe") as h:
        assert h.write_file("/testbed/big.bin", data) >= len(data)
        assert h.read_file("/testbed/big.bin") == data
        h.write_files("/work/patch", {"fix.diff": "--- a\n+++ b\n", "nested/x.txt": b"x"})
        got = h.read_files(["/work/patch"])
        assert got == {"/work/patch/fix.diff": b"--- a\n+++ b\n", "/work/patch/nested/x.txt": b"x"}
        r = h.exec(["git", "-C", "/testbed", "status", "--porcelain"])
        assert b"big.bin" in r.stdout, r
        with pytest.raises(Exception) as e:
            h.read_file("/no/such/file")
        assert "No such file" in str(e.value) or "not" in str(e.value)


def test_archives_from_a_replaced_tar_are_refused(session, tmp_path):
    """Code in the sandbox replaces its tar: what ReadFiles streams back is
    then whatever it writes. Each hostile archive is refused within the
    caps, and nothing lands outside the download's directory."""
    import hostile

    from sandbox_fleet import UnsafeArchiveError

    archives = {"gzip": hostile.gzip_bomb(), "sparse": hostile.sparse(), "chain": hostile.link_chain(),
                "through": hostile.through_a_link()}
    # The SWE-bench-like image: busybox's sh runs its own tar applet,
    # whatever PATH holds, so only an image with a tar of its own shows it.
    with session.acquire("swe") as h:
        h.write_files("/tmp/evil", {f"{k}.tar": v for k, v in archives.items()})
        h.write_file("/tmp/evil/tar", "#!/bin/sh\ncat /tmp/evil/current.tar\n", mode=0o755)
        # Last: from here on the sandbox's tar is this script.
        h.exec('t=$(command -v tar) && rm -f "$t" && cp /tmp/evil/tar "$t"', check=True)
        for kind in archives:
            h.exec(["cp", f"/tmp/evil/{kind}.tar", "/tmp/evil/current.tar"], check=True)
            local = tmp_path / kind / "dest"
            with pytest.raises(UnsafeArchiveError):
                h.download("/tmp/out", str(local))
            assert [p.name for p in (tmp_path / kind).iterdir()] == ["dest"]
            assert not any(local.iterdir()), f"{kind}: {list(local.iterdir())}"
            if kind in ("gzip", "sparse"):
                with pytest.raises(UnsafeArchiveError):
                    h.read_file("/tmp/out/big")


def test_a_sandbox_that_cannot_start(session):
    started = time.monotonic()
    with pytest.raises(SandboxStartError) as e:
        session.acquire("bad", timeout=120)
    assert e.value.verdict == "infra" and e.value.reason == "start", e.value
    assert time.monotonic() - started < 110


def test_a_pod_deleted_mid_exec(session):
    h = session.acquire("bb-1")
    result = {}

    def run():
        try:
            result["r"] = h.exec(["sleep", "30"])
        except Exception as e:  # noqa: BLE001 - the test inspects it
            result["e"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1)
    assert h.is_alive()
    subprocess.run([KUBECTL, "delete", "pod", "-n", NAMESPACE, h.pod, "--wait=false"], check=True, capture_output=True)
    deleted = time.monotonic()
    # Seen from the session's watch, with no command run.
    wait_for("is_alive() to turn False", lambda: not h.is_alive(), timeout=5)
    assert time.monotonic() - deleted < 5 and h.alive_reason()
    t.join(90)
    assert isinstance(result.get("e"), SandboxLostError), result
    assert result["e"].verdict == "infra" and result["e"].reason == "lost"
    # A lost sandbox can still be released.
    session.release(h)
    wait_for("no handle", lambda: not session.status().handles)


def test_trainer_example(session):
    """examples/trainer runs as a user would run it, against this session."""
    import json
    import sys

    trainer = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "trainer", "trainer.py")
    out = subprocess.run([sys.executable, "-P", trainer, "--address", session._t.address, "--images", PROBLEM,
                          "--steps", "2", "--group", "3", "--run", "example"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    steps = [json.loads(line) for line in out.stdout.splitlines()]
    assert [s["step"] for s in steps] == [0, 1]
    for s in steps:
        assert s["rollouts"] == 3 and s["scored"] + s["masked"] == 3
        assert s["scored"] == 3, out.stderr  # no infrastructure failure here
        assert s["mean_reward"] is not None
    detail = json.loads(out.stderr)
    for r in (r for s in detail for r in s["results"]):
        # The reward is the tests' verdict on the policy's patch.
        assert r["reward"] == (1.0 if r["patched"] else 0.0), r


@pytest.fixture(scope="module")
def recycling():
    from conftest import Server, gone

    s = Server("--recycle", "--session")
    c = s.client()
    c.add_tasks([{"id": f"rollout-{i}", "image": PROBLEM} for i in range(4)] + [{"id": "plain", "image": BUSYBOX}])
    yield c
    assert s.stop() == 0, s.logs()
    gone(s)


DIRTY = """cd /testbed && echo change >>calc.py && git -c user.email=a@b -c user.name=r commit -qam change &&
echo notes >untracked.txt && mkdir -p build && echo o >build/calc.o && echo x >/tmp/scratch &&
(setsid sleep 3600 </dev/null >/dev/null 2>&1 &)"""


def test_recycled_rollouts_find_the_sandbox_pristine(recycling):
    h = recycling.acquire("rollout-0")
    assert h.resets == 0
    assert h.exec(["sh", "-c", DIRTY]).exit_code == 0
    assert h.release(reuse=True) == "reset"

    again = recycling.acquire("rollout-1")
    assert (again.claim, again.resets, again.task_id) == (h.claim, 1, "rollout-1")
    # Live sleeps but the keepalive (PID 1): the one the last lease left was
    # killed (a zombie under a keepalive that does not reap is no process).
    r = again.exec(["sh", "-c", "cd /testbed && git status --porcelain --ignored; git log --oneline | wc -l; ls -A /tmp; "
                    "n=0; for d in /proc/[0-9]*; do [ ${d#/proc/} = 1 ] && continue; "
                    "[ \"$(cat $d/comm 2>/dev/null)\" = sleep ] || continue; "
                    "grep -q '^State:.*zombie' $d/status 2>/dev/null && continue; n=$((n+1)); done; echo $n"])
    assert r.text()[0] == "1\n0\n", r.text()
    # A change no reset puts back: the sandbox does not verify, and goes.
    assert again.exec(["git", "-C", "/testbed", "config", "core.tampered", "true"]).exit_code == 0
    assert again.release(reuse=True) == "quarantined"

    fresh = recycling.acquire("rollout-2")
    assert fresh.claim != h.claim and fresh.resets == 0
    counts = recycling.status().counts
    assert (counts.reused, counts.quarantined) == (1, 1), counts
    assert fresh.release() == "released"


def test_commands_over_a_session_keep_bytes_and_exit_codes(recycling):
    # serve --session: every command below goes over one shell.
    with recycling.acquire("plain") as h:
        every_byte = bytes(range(256))
        assert h.exec(["cat"], stdin=every_byte).stdout == every_byte
        assert h.exec(["printf", "no newline"]).stdout == b"no newline"
        r = h.exec(["sh", "-c", "echo out; echo err >&2; exit 42"])
        assert (r.exit_code, r.stdout, r.stderr) == (42, b"out\n", b"err\n")
        for code in (0, 1, 127, 255):
            assert h.exec(["sh", "-c", f"exit {code}"]).exit_code == code
        assert h.exec(["sh", "-c", "cd /; X=1"]).exit_code == 0
        assert h.exec(["sh", "-c", "pwd; echo ${X:-unset}"], cwd="/tmp").stdout == b"/tmp\nunset\n"
        # Stdin past what a session command carries (1 MiB) goes by an exec.
        big = os.urandom(3 << 20)
        assert h.exec(["sh", "-c", "cat >/tmp/big && echo stored"], stdin=big).stdout == b"stored\n"
        assert h.read_file("/tmp/big") == big


def test_a_session_that_breaks_twice_quarantines_its_sandbox(recycling):
    h = recycling.acquire("rollout-3")
    for _ in range(2):
        # The command kills the session's shell under it: that command
        # fails, and the next one gets a shell again.
        with pytest.raises(InfraError):
            h.exec(["sh", "-c", "kill -9 $PPID; sleep 5"])
        assert h.exec(["echo", "again"]).stdout == b"again\n"
    assert h.release(reuse=True) == "quarantined"

