"""The framework environments driven as their frameworks drive them:
stand-ins of the calling code (mini-swe-agent v1.9.1's
DefaultAgent.execute_action and has_finished, v2.4.6's
DefaultAgent.execute_actions; SWE-agent's SWEEnv and handle_action;
R2E-Gym's RepoEnv.run_action), written here from their source, shared by
FakeFleet (test_fake_exec.py) and the real node (test_real_node.py). Each
episode solves the same problem: look, time out, patch with git apply, and
score by the tests' exit code."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field

import pytest

from sandbox_fleet.adapters import MiniSweEnvironment, R2EGymRuntime, SweRexDeployment
from sandbox_fleet.adapters.r2egym import repo_env
from sandbox_fleet.adapters.miniswe import Submitted
from sandbox_fleet.adapters.swerex import (
    BashIncorrectSyntaxError,
    CommandTimeoutError,
    NonZeroExitCodeError,
    SessionDoesNotExistError,
)


def v1_step(env, command: str) -> dict:
    """v1's agent: a timeout becomes its timeout observation, with the
    output so far; a first line of the final marker ends the run."""
    try:
        output = env.execute(command)
    except subprocess.TimeoutExpired as e:
        # v1.9.1's DefaultAgent.execute_action, as written there.
        output = e.output.decode("utf-8", errors="replace") if e.output else ""
        return {"timeout": True, "output": output, "message": str(e)}
    except TimeoutError:
        return {"timeout": True, "output": ""}
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
    assert r == {"output": f"out\nerr\nhi\n{workdir}\n", "returncode": 3}, r
    # forward_env: the trainer's variables that are set; env wins over them.
    os.environ.update(SF_FORWARDED="fw", SF_KEPT_HERE="no", GREETING="from the trainer")
    try:
        fwd = MiniSweEnvironment(h, cwd=workdir, forward_env=["SF_FORWARDED", "SF_UNSET", "GREETING"], env={"GREETING": "hi"})
        r = v1_step(fwd, 'echo "$SF_FORWARDED ${SF_UNSET-unset} $GREETING ${SF_KEPT_HERE-absent}"')
        assert r["output"] == "fw unset hi absent\n", r
    finally:
        for k in ("SF_FORWARDED", "SF_KEPT_HERE", "GREETING"):
            del os.environ[k]
    assert v1_step(env, "shopt -q login_shell && echo login")["output"] == "login\n"  # bash -lc, as docker exec runs it
    started = time.monotonic()
    r = v1_step(env, "echo partial; sleep 30")
    assert r["timeout"] and r["output"] == "partial\n", r
    assert "echo partial; sleep 30" in r["message"] and "exec" not in r["message"], r  # the user's command
    assert time.monotonic() - started < 9
    assert v1_step(env, "sleep 30") == {"timeout": True, "output": "", "message": r["message"].replace("echo partial; ", "")}
    assert v1_step(env, "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\ndiff --git a b\\n'") == {"submitted": "diff --git a b\n"}

    [r] = v2_step(env, "echo v2; exit 1")
    assert r == {"output": "v2\n", "returncode": 1, "exception_info": ""}, r
    [r] = v2_step(env, "echo partial; sleep 30")
    assert r["returncode"] == -1 and r["output"] == "partial\n" and "timed out after 5 seconds" in r["exception_info"], r
    assert "'bash', '-lc', 'echo partial; sleep 30'" in r["exception_info"], r
    assert r["extra"]["exception_type"] == "TimeoutExpired"
    assert env.execute({"command": "echo x"}, timeout=1)["output"] == "x\n"
    assert v2_step(env, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo patch") == {"submitted": "patch\n"}
    assert env.get_template_vars()["cwd"] == workdir and env.serialize()["info"]["config"]["environment"]["timeout"] == 5


# The problem every episode solves: /testbed of the real node's problem
# image 1 (internal/testimages/swe.go), a git repository whose add() is
# wrong; on FakeFleet seed_testbed makes the same.
PROBLEM_FILES = {
    "calc.py": '"""Problem 1."""\n\n\ndef add(a, b):\n    return a - b + 1 - 1\n',
    "test_calc.py": "import unittest\n\nimport calc\n\n\nclass TestAdd(unittest.TestCase):\n"
                    "    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\n\n"
                    'if __name__ == "__main__":\n    unittest.main()\n',
}
TESTBED = "/testbed"


def seed_testbed(h) -> None:
    h.write_files("/testbed", PROBLEM_FILES)
    h.exec(["sh", "-c", "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm pristine"],
           cwd="/testbed", check=True)


def fix_patch(calc: str) -> str:
    """The diff a model would write: add() fixed, as git apply takes it."""
    fixed = calc.replace("return a - b + 1 - 1", "return a + b")
    assert fixed != calc, calc
    body = "".join(difflib.unified_diff(calc.splitlines(True), fixed.splitlines(True), "a/calc.py", "b/calc.py"))
    return "diff --git a/calc.py b/calc.py\n" + body


def miniswe_episode(h) -> float:
    """mini-swe-agent v2's loop over a whole task: look, time out, fix with
    a patch, run the tests; the reward is their exit code's."""
    env = MiniSweEnvironment(h, cwd="/testbed", timeout=5)
    [r] = v2_step(env, f"cd {TESTBED} && cat calc.py")
    calc = r["output"]
    assert "def add" in calc, r
    [r] = v2_step(env, "sleep 30")
    assert r["returncode"] == -1, r
    patch = fix_patch(calc)
    [r] = v2_step(env, f"cd {TESTBED} && cat > fix.patch <<'EOF'\n{patch}EOF\ngit apply fix.patch && rm fix.patch && git diff --stat")
    assert r["returncode"] == 0 and "calc.py" in r["output"], r
    [r] = v2_step(env, f"cd {TESTBED} && python3 -m unittest -q")
    return 1.0 if r["returncode"] == 0 else 0.0


# SWE-ReX's requests, as SWE-agent builds them (swerex/runtime/abstract.py):
# stand-ins with the same fields, for when SWE-ReX is not installed.
@dataclass
class BashAction:
    command: str
    session: str = "default"
    timeout: float | None = None
    is_interactive_command: bool = False
    is_interactive_quit: bool = False
    check: str = "raise"
    error_msg: str = ""
    expect: list = field(default_factory=list)
    action_type: str = "bash"


@dataclass
class BashInterruptAction:
    session: str = "default"
    timeout: float = 0.2
    n_retry: int = 3
    expect: list = field(default_factory=list)
    action_type: str = "bash_interrupt"


@dataclass
class CreateBashSessionRequest:
    startup_source: list = field(default_factory=list)
    session: str = "default"
    session_type: str = "bash"
    startup_timeout: float = 1.0


@dataclass
class RexCommand:
    command: str | list
    timeout: float | None = None
    shell: bool = False
    check: bool = False
    error_msg: str = ""
    env: dict | None = None
    cwd: str | None = None
    merge_output_streams: bool = False


@dataclass
class ReadFileRequest:
    path: str
    encoding: str | None = None
    errors: str | None = None


@dataclass
class WriteFileRequest:
    content: str
    path: str


@dataclass
class UploadRequest:
    source_path: str
    target_path: str


class SWEEnv:
    """SWE-agent's SWEEnv (sweagent/environment/swe_env.py at 3ea751c) as
    far as it talks to the deployment: one asyncio.run per call."""

    def __init__(self, deployment):
        self.deployment = deployment

    def start(self) -> None:
        asyncio.run(self.deployment.start())
        asyncio.run(self.deployment.runtime.create_session(
            CreateBashSessionRequest(startup_source=["/root/.bashrc"], startup_timeout=10)))
        self.communicate(" && ".join(f"export {k}={shlex.quote(v)}" for k, v in
                                     {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PAGER": "cat"}.items()), check="raise")

    def communicate(self, input: str, timeout: float = 25, *, check: str = "ignore", error_msg: str = "Command failed") -> str:
        r = asyncio.run(self.deployment.runtime.run_in_session(
            BashAction(command=input, timeout=timeout, check="silent" if check else "ignore")))
        if check != "ignore" and r.exit_code != 0:
            raise RuntimeError(f"Command {input!r} failed ({r.exit_code=}): {error_msg}")
        return r.output

    def interrupt_session(self) -> None:
        asyncio.run(self.deployment.runtime.run_in_session(BashInterruptAction()))

    def read_file(self, path: str) -> str:
        return asyncio.run(self.deployment.runtime.read_file(ReadFileRequest(path=path))).content

    def write_file(self, path: str, content: str) -> None:
        asyncio.run(self.deployment.runtime.write_file(WriteFileRequest(path=path, content=content)))

    def execute_command(self, command: str, check: bool = False, env=None, cwd=None):
        return asyncio.run(self.deployment.runtime.execute(RexCommand(command=command, shell=True, check=check, env=env, cwd=cwd)))

    def close(self) -> None:
        asyncio.run(self.deployment.stop())


def swe_agent_step(env: SWEEnv, action: str, timeout: float = 5) -> str:
    """SWE-agent's DefaultAgent.handle_action and its syntax-error handling
    (sweagent/agent/agents.py at 3ea751c): the observation the model sees."""
    try:
        return env.communicate(input=action, timeout=timeout, check="ignore")
    except CommandTimeoutError:
        env.interrupt_session()
        return f"The command '{action}' was cancelled because it took more than {timeout} seconds."
    except BashIncorrectSyntaxError as e:
        return f"Your bash command contained syntax errors and was NOT executed. {e.extra_info['bash_stderr']}"


def swerex_episode(h, tmp_path) -> float:
    env = SWEEnv(SweRexDeployment(h))
    env.start()
    assert swe_agent_step(env, f"cd {TESTBED}") == ""
    calc = swe_agent_step(env, "cat calc.py")
    assert "def add" in calc, calc
    assert env.read_file("/testbed/calc.py") == calc
    assert swe_agent_step(env, "echo out; echo err >&2") == "out\nerr\n"  # one stream, as a terminal shows it
    started = time.monotonic()
    assert "was cancelled" in swe_agent_step(env, "echo partial; sleep 30", timeout=2)
    assert time.monotonic() - started < 9
    assert swe_agent_step(env, "pwd").strip().endswith("/testbed")  # the session kept its cd
    assert "NOT executed" in swe_agent_step(env, "echo ran > ran.txt; if then fi")
    assert not h.exists("/testbed/ran.txt")  # nothing of it ran
    with pytest.raises(NonZeroExitCodeError):
        asyncio.run(env.deployment.runtime.run_in_session(BashAction(command="false", check="raise")))
    with pytest.raises(SessionDoesNotExistError):
        asyncio.run(env.deployment.runtime.run_in_session(BashAction(command="true", session="other")))
    with pytest.raises(FileNotFoundError):
        env.read_file("/testbed/no-such-file")

    env.write_file("/testbed/fix.patch", fix_patch(calc))
    assert swe_agent_step(env, "git apply fix.patch && rm fix.patch; echo $?") == "0\n"
    assert "return a + b" in env.read_file("/testbed/calc.py")

    tool = tmp_path / "tools" / "hello"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho hello from the tool\n")
    tool.chmod(0o755)
    asyncio.run(env.deployment.runtime.upload(UploadRequest(source_path=str(tool.parent), target_path="/tmp/tools")))
    r = env.execute_command("/tmp/tools/hello", check=True)
    assert (r.exit_code, r.stdout) == (0, "hello from the tool\n"), r
    # write_file over an executable keeps it executable (Path.write_text).
    env.write_file("/tmp/tools/hello", "#!/bin/sh\necho rewritten\n")
    assert env.execute_command("/tmp/tools/hello", check=True).stdout == "rewritten\n"
    env.write_file("/tmp/tools/new/file.txt", "x")
    assert env.execute_command("stat -c %a /tmp/tools/new/file.txt").stdout == "644\n"
    # env is the whole environment, as subprocess.run takes it (sh adds PWD).
    seen = env.execute_command("env", env={"ONLY": "this"}).stdout.splitlines()
    assert "ONLY=this" in seen and not [v for v in seen if v.startswith(("HOME=", "SANDBOX_ROOT="))], seen
    assert asyncio.run(env.deployment.is_alive()).is_alive

    reward = 1.0 if swe_agent_step(env, "python3 -m unittest -q 2>/dev/null; echo $?").strip() == "0" else 0.0
    env.close()
    return reward


def r2egym_episode(h) -> float:
    """R2E-Gym's RepoEnv.run_action (agenthub/environment/env.py at 69bc953)
    calls runtime.run(bash_cmd, timeout=...) and shows the model its output
    and error code; the reward is its test run's."""
    rt = R2EGymRuntime(h, ds={"problem_statement": "Fix add()."}, repo_path="/testbed")
    assert rt.get_task_instruction() == "Fix add()."
    tagged = R2EGymRuntime(h, ds={"problem_statement": "[ISSUE]\nadd() is wrong\n[/ISSUE]\nhints"})
    assert tagged.get_task_instruction() == "\nadd() is wrong\n"  # what R2E-Gym shows the model
    # Each command runs under timeout(1), as R2E-Gym's: an assignment first fails.
    out, code = rt.run("FOO=1 env")
    assert code == "Error: Exit code 127" and "FOO=1" in out, (out, code)
    calc, code = rt.run("cat calc.py")
    assert code == "0" and "def add" in calc, (calc, code)
    assert rt.run("echo out; echo err >&2; exit 3") == ("out\nerr\n", "Error: Exit code 3")
    assert rt.run("printf '\\033[1mbold\\033[0m\\r\\n'") == ("bold\n", "0")
    started = time.monotonic()
    assert rt.run("sleep", timeout=2, args="30") == ("The command took too long to execute (>2s)", "-1")
    assert time.monotonic() - started < 9
    assert rt.run("pwd")[0].strip().endswith("/testbed") and rt.run("mkdir -p sub") == ("", "0")
    assert rt.run("pwd", workdir="/testbed/sub")[0].strip().endswith("/testbed/sub")
    assert rt.demux_run("sh -c 'echo out; echo err >&2'") == ("out\n", "err\n", "0")
    assert rt.demux_run("echo a; b") == ("a; b\n", "", "0")  # no shell: the Docker SDK splits the string

    rt.create_file("testbed/notes.txt", "written\n")
    assert rt.run("cat notes.txt") == ("written\n", "0")
    rt.start_new_branch()
    assert rt.apply_patch(fix_patch(calc)) == ("", "0")
    assert "return a + b" in rt.get_patch()
    assert rt.reverse_patch(fix_patch(calc)) == ("", "0")
    assert "return a - b" in rt.run("cat calc.py")[0]
    assert rt.apply_patch(fix_patch(calc))[1] == "0"
    _, code = rt.run("python3 -m unittest -q")
    return 1.0 if code == "0" else 0.0


# R2E-Gym's modules as repo_env() and docker_runtime() import them, for
# when R2E-Gym is not installed: its DockerRuntime's reward for r2e images
# (_calculate_reward_r2e: run_tests, parse the log, compare with the row's
# expected_output_json), its setup_env's moves, and RepoEnv's run_action
# and step, as agenthub/runtime/docker.py and environment/env.py at
# 69bc953 write them; the log parser is a stand-in of parse_log_fn's for a
# unittest -v log.
class _DockerRuntime:
    def setup_env(self) -> None:
        for skip_file in ("run_tests.sh", "r2e_tests"):
            self.run(f"mv {self.repo_path}/{skip_file} {self.alt_path}/{skip_file}")

    def run_tests(self) -> tuple[str, str]:
        output, error_code = self.run(f"bash {self.alt_path}/run_tests.sh", timeout=300)
        return output, error_code

    def parse_logs(self, log_output: str) -> dict:
        found = re.findall(r"^(\w+) \(.*\) \.\.\. (ok|FAIL|ERROR)$", log_output, re.M)
        return {name: "PASSED" if status == "ok" else "FAILED" for name, status in found}

    def _calculate_reward(self, get_test_output=False) -> float:
        output, error_code = self.run_tests()
        parse = self.parse_logs(output)
        expected = json.loads(self.ds["expected_output_json"])
        reward = 1.0 if parse and parse == expected else 0.0
        return (reward, output) if get_test_output else reward


@dataclass(frozen=True)
class _EnvArgs:
    ds: dict
    repo_path: str | None = None
    docker_image: str | None = None


class _RepoEnv:
    def run_action(self, action, timeout: int):
        bash_output, error_code = self.runtime.run(action.to_bashcmd(), timeout=timeout)
        return bash_output, error_code, 0.0

    def step(self, action, timeout: int):
        bash_output, error_code, total_time = self.run_action(action, timeout=timeout)
        self.observation = (bash_output, error_code, action)
        if "finish" in action.function_name.lower():
            self.done = True
        return self.observation, 0, self.done, {"total_time": total_time}

    def get_task_instruction(self) -> str:
        return self.runtime.get_task_instruction()


@dataclass
class _Action:
    function_name: str
    command: str

    def to_bashcmd(self) -> str:
        return self.command


@contextlib.contextmanager
def _r2egym_stand_ins():
    """sys.modules with the stand-ins at R2E-Gym's module paths, unless
    R2E-Gym itself is installed."""
    if importlib.util.find_spec("r2egym") is not None:
        yield
        return
    modules = {
        "r2egym": {}, "r2egym.agenthub": {}, "r2egym.agenthub.runtime": {}, "r2egym.agenthub.environment": {},
        "r2egym.agenthub.agent": {}, "r2egym.agenthub.runtime.docker": {"DockerRuntime": _DockerRuntime},
        "r2egym.agenthub.environment.env": {"RepoEnv": _RepoEnv, "EnvArgs": _EnvArgs},
        "r2egym.agenthub.agent.commands": {"ParseCommandBash": object},
    }
    saved = {name: sys.modules.get(name) for name in modules}
    for name, attrs in modules.items():
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
    try:
        yield
    finally:
        for name, m in saved.items():
            if m is None:
                del sys.modules[name]
            else:
                sys.modules[name] = m


def r2egym_repo_env_episode(h) -> float:
    """R2E-Gym's RepoEnv on the sandbox (repo_env): the task instruction,
    steps as its agent takes them, and R2E-Gym's reward, which runs the
    tests setup_env hid in /root and compares their log with the row."""
    h.write_file("/testbed/run_tests.sh", "cd /testbed && python3 -m unittest -v test_calc 2>&1\n")
    ds = {"problem_statement": "[ISSUE]add() subtracts[/ISSUE]", "repo_name": "calc",
          "expected_output_json": json.dumps({"test_add": "PASSED"})}
    with _r2egym_stand_ins():
        # An R2E-Gym image, as R2E-Gym tells them from SWE-bench's by name.
        env = repo_env(h, ds, docker_image="namanjain12/calc_final:1")
        assert env.get_task_instruction() == "add() subtracts"
        assert not h.exists("/testbed/run_tests.sh") and h.exists("/root/run_tests.sh")  # hidden by setup_env
        assert env.runtime._calculate_reward() == 0.0  # add() is wrong yet
        (calc, code, _), _, done, _ = env.step(_Action("execute_bash", "cat calc.py"), timeout=30)
        assert code == "0" and not done
        env.step(_Action("execute_bash", f"cat > fix.patch <<'EOF'\n{fix_patch(calc)}EOF\ngit apply fix.patch"), timeout=30)
        _, _, done, _ = env.step(_Action("finish", "true"), timeout=30)
        assert done
        reward, log = env.runtime._calculate_reward(get_test_output=True)
        assert "test_add" in log, log
        return reward

