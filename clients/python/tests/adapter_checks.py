"""The mini-swe-agent environment driven as mini-swe-agent's agents drive
theirs: stand-ins of their calling code (v1.9.1's
DefaultAgent.execute_action and has_finished; v2.4.6's
DefaultAgent.execute_actions), written here from their source, shared by
FakeFleet (test_fake_exec.py) and the real node (test_real_node.py)."""

from __future__ import annotations

import subprocess
import time

from sandbox_fleet.adapters import MiniSweEnvironment
from sandbox_fleet.adapters.miniswe import Submitted


def v1_step(env, command: str) -> dict:
    """v1's agent: a timeout becomes its timeout observation, with the
    output so far; a first line of the final marker ends the run."""
    try:
        output = env.execute(command)
    except (TimeoutError, subprocess.TimeoutExpired) as e:
        partial = e.output.decode("utf-8", errors="replace") if isinstance(e.output, bytes) else (e.output or "")
        return {"timeout": True, "output": partial}
    lines = output.get("output", "").lstrip().splitlines(keepends=True)
    if lines and lines[0].strip() in ["MINI_SWE_AGENT_FINAL_OUTPUT", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]:
        return {"submitted": "".join(lines[1:])}
    return output


def v2_step(env, command: str) -> list[dict] | dict:
    """v2's agent: every action of the model's message executed; Submitted
    interrupts the flow with its exit message."""
    try:
        return [env.execute(action) for action in [{"command": command}]]
    except Submitted as e:
        return {"submitted": e.messages[0]["extra"]["submission"]}


def miniswe(h, workdir: str) -> None:
    env = MiniSweEnvironment(h, cwd=workdir, timeout=5, env={"GREETING": "hi"})
    r = v1_step(env, "echo out; echo err >&2; echo $GREETING; pwd; exit 3")
    # (FakeFleet's sandbox root is a local directory: its pwd ends so.)
    assert r["returncode"] == 3 and r["output"].startswith("out\nerr\nhi\n") and r["output"].endswith(f"{workdir}\n"), r
    assert v1_step(env, "shopt -q login_shell && echo login")["output"] == "login\n"  # bash -lc, as docker exec runs it
    started = time.monotonic()
    r = v1_step(env, "echo partial; sleep 30")
    assert r == {"timeout": True, "output": "partial\n"}, r
    assert time.monotonic() - started < 9
    assert v1_step(env, "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\ndiff --git a b\\n'") == {"submitted": "diff --git a b\n"}

    [r] = v2_step(env, "echo v2; exit 1")
    assert r == {"output": "v2\n", "returncode": 1, "exception_info": ""}, r
    [r] = v2_step(env, "echo partial; sleep 30")
    assert r["returncode"] == -1 and r["output"] == "partial\n" and "timed out after 5 seconds" in r["exception_info"], r
    assert r["extra"]["exception_type"] == "TimeoutExpired"
    assert env.execute({"command": "echo x"}, timeout=1)["output"] == "x\n"
    assert v2_step(env, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo patch") == {"submitted": "patch\n"}
    assert env.get_template_vars()["cwd"] == workdir and env.serialize()["info"]["config"]["environment"]["timeout"] == 5
