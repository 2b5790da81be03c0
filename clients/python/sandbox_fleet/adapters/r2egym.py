"""R2E-Gym's runtime over a fleet sandbox: the object its ``RepoEnv`` and
agents call (``env.runtime.run(...)``), in place of its ``DockerRuntime``.

Read from R2E-Gym's source (github.com/R2E-Gym/R2E-Gym at 69bc953):
src/r2egym/agenthub/runtime/docker.py (``DockerRuntime``),
src/r2egym/agenthub/environment/env.py (``RepoEnv``) and the calling code
under src/r2egym/agenthub (agent.py, run/edit.py), which reach into the
runtime for ``run``, ``run_tests``, ``demux_run_tests``, ``apply_patch``,
``get_patch``, ``checkout``, ``commit_after_step``, ``soft_git_reset``,
``copy_to_container``, ``get_task_instruction``, ``_calculate_reward``,
``repo_name``, ``commit``, ``docker_image``, ``ds`` and ``close``.

A command runs as R2E-Gym runs it: ``/bin/sh -c "timeout T CODE ARGS"`` in
the repo's directory with ``PATH`` set to the image's tool directories,
stdout and stderr interleaved, and comes back as ``(output, error_code)``
strings:

- exit 0: the output without ANSI colour codes or carriage returns, "0";
- another exit: the output as it is, "Error: Exit code N";
- exit 124 (its timeout): "The command took too long to execute (>Ts)", "-1";
- an exception: "Error: repr(e)", "-1".

``demux_run`` runs ``timeout T CODE ARGS`` split as the Docker SDK splits a
string command (``shlex.split``, no shell), stdout and stderr apart. A
patch is copied to ``/tmp/<container>_<id>.patch`` and applied there, and
a file made under /testbed then moved, as R2E-Gym does. Beyond R2E-Gym,
the sandbox bounds every command at T + 5 s, as R2E-Gym's own wait does,
and stops it with what it started, so none is left running.

The task instruction is the text inside ``[ISSUE]…[/ISSUE]`` of the row's
``problem_statement`` where it has the tags, else all of it, as R2E-Gym
gives it to the model.

With R2E-Gym installed, ``docker_runtime(handle, ds)`` is R2E-Gym's own
``DockerRuntime`` class over the sandbox — its reward code
(``_calculate_reward``, ``parse_logs``, ``get_logs_eval``,
``run_swebv_regression``) and its ``setup_env`` run as they are, only the
container calls are the fleet's — and ``repo_env(handle, ds)`` its
``RepoEnv`` on that runtime.

Run against R2E-Gym's real code (its source at 69bc953, on FakeFleet, its
imports of swebench, gym, simple_parsing and the model clients stubbed, as
no package here has them): ``repo_env`` built its ``RepoEnv`` on its own
``DockerRuntime`` class; its ``setup_env`` hid run_tests.sh in /root; its
``execute_bash`` tool, copied and made executable as ``add_commands``
does, ran a fix through ``RepoEnv.step``; its ``_calculate_reward``
(``_calculate_reward_r2e`` with its pytest log parser) gave 0.0 before the
fix and 1.0 after; ``get_task_instruction`` and ``get_patch`` as its own.
``add_commands`` itself was not run (its command parsing needs
simple_parsing), nor the SWE-bench reward (it needs swebench).
"""

from __future__ import annotations

import logging
import re
import shlex
import uuid
from typing import Any

from .._commands import ExecResult
from .._handle import Handle
from ._files import copy_in

CMD_TIMEOUT = 120
DOCKER_PATH = "/root/.venv/bin:/root/.local/bin:/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# R2E-Gym waits for a command this much past its own timeout.
_GRACE = 5

_COLOURS = re.compile(r"\x1b\[[0-9;]*m|\r")
_ISSUE = re.compile(r"\[ISSUE\](.*)\[/ISSUE\]", re.DOTALL)


class _FleetContainer:
    """What R2E-Gym's DockerRuntime does with its container, done in the
    fleet sandbox instead: the attributes its calling code reads, and
    running commands and copying files in."""

    def __init__(self, handle: Handle, ds: dict[str, Any] | None = None, repo_path: str = "/testbed", alt_path: str = "/root",
                 docker_image: str | None = None, command: str | list[str] = "/bin/bash", logger: Any = None,
                 path: str = DOCKER_PATH, **_ignored: Any):
        self.handle = handle
        self.ds = dict(ds or {})
        self.docker_image: str = docker_image or handle.image or str(self.ds.get("docker_image", ""))
        self.swebench_verified = "swebench" in self.docker_image
        self.repo_path = repo_path
        self.alt_path = alt_path
        self.command = command
        self.path = path
        self.repo_name = self.ds.get("repo" if self.swebench_verified else "repo_name", "")
        self.commit_json = self.ds.get("parsed_commit" if self.swebench_verified else "parsed_commit_content")
        self.logger = logger or logging.getLogger("DockerRuntime")
        # The sandbox's Pod stands for the container R2E-Gym names.
        self.container_name = handle.pod or handle.id
        self.docker_kwargs: dict[str, Any] = {}
        self.current_commit = ""

    def _exec(self, argv: list[str], timeout: int, workdir: str | None, merge: bool, stdin: str | None = None) -> ExecResult:
        if merge:
            argv = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh", *argv]
        return self.handle.exec(argv, stdin=stdin, timeout=timeout + _GRACE, cwd=workdir or self.repo_path,
                                env={"PATH": self.path})

    def run(self, code: str, timeout: int = CMD_TIMEOUT, args: str = "", workdir: str | None = None,
            type: str | None = None) -> tuple[str, str]:
        """Runs ``timeout T code args`` with sh and returns ``(output,
        error_code)`` as R2E-Gym's runtime does."""
        command = f"timeout {timeout} {code} {args}"
        try:
            r = self._exec(["/bin/sh", "-c", command], timeout, workdir, merge=True)
        except Exception as e:  # as R2E-Gym's: the agent sees what went wrong
            return f"Error: {e!r}", "-1"
        output = r.stdout.decode("utf-8", errors="replace")
        if r.timed_out or r.exit_code == 124:
            self.logger.error(f"Internal Timeout: {timeout}s")
            return f"The command took too long to execute (>{timeout}s)", "-1"
        if r.exit_code != 0:
            self.logger.error(f"Error: Exit code {r.exit_code} \nError Message: {output}")
            return output, f"Error: Exit code {r.exit_code}"
        return _COLOURS.sub("", output), str(r.exit_code)

    def demux_run(self, code: str, timeout: int = CMD_TIMEOUT, args: str = "",
                  workdir: str | None = None) -> tuple[str, str, str]:
        """As ``run``, with no shell and stdout and stderr apart:
        ``(stdout, stderr, error_code)``."""
        try:
            r = self._exec(shlex.split(f"timeout {timeout} {code} {args}"), timeout, workdir, merge=False)
        except Exception as e:
            return f"Error: {e!r}", f"Error: {e!r}", "-1"
        stdout = r.stdout.decode("utf-8", errors="replace")
        stderr = r.stderr.decode("utf-8", errors="replace")
        if r.exit_code != 0:
            return stdout, stderr, f"Error: Exit code {r.exit_code}"
        return stdout, stderr, str(r.exit_code)

    def copy_to_container(self, src_path: str, dest_path: str) -> None:
        """Copies a local file or tree to dest_path in the sandbox."""
        copy_in(self.handle, src_path, dest_path)

    def create_file(self, file_path: str, content: str) -> None:
        """Writes content under /testbed, then moves it to /file_path."""
        staged = f"{file_path}_{uuid.uuid4()}"
        self.handle.write_file(f"/testbed/{staged}", content)
        self.run(f"mv /testbed/{staged} /{file_path}")

    def _patch(self, patch: str, git_apply: str) -> tuple[str, str]:
        path = f"/tmp/{self.container_name}_{uuid.uuid4()}.patch"
        self.handle.write_file(path, patch)
        return self.run(f"{git_apply} {path}")

    def apply_patch(self, patch: str) -> tuple[str, str]:
        return self._patch(patch, "git apply --whitespace=fix")

    def reverse_patch(self, patch: str) -> tuple[str, str]:
        return self._patch(patch, "git apply -R")

    def get_task_instruction(self) -> str:
        content = str(self.ds.get("problem_statement", ""))
        found = _ISSUE.search(content)
        return found.group(1) if found else content

    def start_container(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to start: the fleet warmed and claimed the sandbox."""

    def stop_container(self) -> None:
        """Nothing to stop: the sandbox is the fleet's, released by whoever
        acquired it."""

    def reset(self) -> None:
        """Nothing to restart: release the sandbox with ``reuse=True`` to
        have the fleet reset it (``serve --recycle``)."""

    def close(self) -> None:
        """Nothing: the sandbox is the fleet's, released by whoever acquired it."""


class R2EGymRuntime(_FleetContainer):
    """R2E-Gym's ``DockerRuntime`` over a sandbox held from a fleet, with
    no need of R2E-Gym::

        with fleet.acquire(row["instance_id"]) as sb:
            runtime = R2EGymRuntime(sb, ds=row)
            out, code = runtime.run("python -m pytest -x", timeout=300)

    ``ds`` is the task's dataset row (R2E-Gym's ``ds``); the sandbox, not
    the row, decides the image. Its reward (``_calculate_reward``) is R2E-Gym's
    own code: take ``docker_runtime(handle, ds)`` with R2E-Gym installed.
    """

    def read_file(self, rel_file_path: str) -> str:
        """A file under ``alt_path`` (where R2E-Gym keeps what the agent is
        not shown), as text."""
        output, _ = self.run(f"cat /{self.alt_path}/{rel_file_path}")
        return output

    def run_tests(self) -> tuple[str, str]:
        output, error_code = self.run(f"bash {self.alt_path}/run_tests.sh", timeout=300)
        return _COLOURS.sub("", output), error_code

    def demux_run_tests(self) -> tuple[str, str, str]:
        stdout, stderr, error_code = self.demux_run(f"bash {self.alt_path}/run_tests.sh")
        return _COLOURS.sub("", stdout), _COLOURS.sub("", stderr), error_code

    def checkout(self, commit_hash: str) -> tuple[str, str]:
        return self.run(f"git checkout {commit_hash}")

    def get_patch(self) -> str:
        """The diff of the repository against its commit, new files too."""
        output, _ = self.run("git add -A && git diff --cached")
        return output

    def start_new_branch(self, branch_name: str = "exp") -> tuple[str, str]:
        self.run("git config --global user.email 'you@example.com'")
        self.run("git config --global user.name 'Your Name'")
        output, error_code = self.run("git rev-parse HEAD")
        self.current_commit = output.strip()
        return output, error_code

    def commit_after_step(self, step_idx: int) -> tuple[str, str]:
        self.run("git add .")
        return self.run(f"git commit -m '{step_idx}'")

    def undo_last_commit(self) -> tuple[str, str]:
        return self.run("git reset --hard HEAD~1")

    def get_current_commit_hash(self) -> str:
        output, _ = self.run("git rev-parse HEAD")
        return output.strip()

    def soft_git_reset(self) -> tuple[str, str]:
        return self.run(f"git reset --soft {self.current_commit}")

    def _calculate_reward(self, get_test_output: bool = False) -> Any:
        raise NotImplementedError("the reward is R2E-Gym's own code (its log parsers and SWE-bench's grading): install "
                                  "R2E-Gym and take sandbox_fleet.adapters.r2egym.docker_runtime(handle, ds), which runs "
                                  "it on the sandbox")


def docker_runtime(handle: Handle, ds: dict[str, Any], **kwargs: Any) -> Any:
    """R2E-Gym's own ``DockerRuntime`` over a fleet sandbox: its methods as
    they are (reward, log parsing, ``setup_env``), its container calls the
    fleet's. It runs R2E-Gym's ``setup_env`` on the sandbox, as
    ``DockerRuntime.__init__`` does after starting its container. Needs
    R2E-Gym installed (``import r2egym``)."""
    from r2egym.agenthub.runtime.docker import DockerRuntime  # type: ignore[import]

    cls = type("FleetDockerRuntime", (_FleetContainer, DockerRuntime), {"__module__": __name__})
    runtime = cls(handle, ds=ds, **kwargs)
    if runtime.swebench_verified:
        from r2egym.agenthub.trajectory.swebench_utils import make_test_spec  # type: ignore[import]

        runtime.test_spec = make_test_spec(runtime.ds)
    if runtime.commit_json:
        import json

        from r2egym.commit_models.diff_classes import ParsedCommit  # type: ignore[import]

        runtime.commit = ParsedCommit(**json.loads(runtime.commit_json))
    runtime.setup_env()
    return runtime


def repo_env(handle: Handle, ds: dict[str, Any], logger: Any = None, **kwargs: Any) -> Any:
    """R2E-Gym's own ``RepoEnv`` over a fleet sandbox: as
    ``RepoEnv(EnvArgs(ds=ds))`` builds it, with ``docker_runtime(handle,
    ds)`` in place of the Docker container it would start. Needs R2E-Gym
    installed."""
    from r2egym.agenthub.agent.commands import ParseCommandBash  # type: ignore[import]
    from r2egym.agenthub.environment.env import EnvArgs, RepoEnv  # type: ignore[import]

    env = RepoEnv.__new__(RepoEnv)
    env.logger = logger or logging.getLogger("RepoEnv")
    env.runtime = docker_runtime(handle, ds, logger=env.logger, **kwargs)
    env.args = EnvArgs(ds=ds)
    env.done = False
    env.observation = None
    env.state = None
    env.cmd_parser = ParseCommandBash()
    return env
