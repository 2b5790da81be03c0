"""R2E-Gym's runtime over a fleet sandbox: the object its ``RepoEnv`` and
agents call (``env.runtime.run(...)``), in place of its ``DockerRuntime``.

Read from R2E-Gym's source (github.com/R2E-Gym/R2E-Gym at 69bc953):
src/r2egym/agenthub/runtime/docker.py (``DockerRuntime``) and
src/r2egym/agenthub/environment/env.py (how ``RepoEnv.run_action`` calls
it). A command runs as ``/bin/sh -c "timeout T CODE ARGS"`` in the repo's
directory with the image's tool directories first on PATH, stdout and
stderr interleaved, and comes back as ``(output, error_code)`` strings:

- exit 0: the output without ANSI colour codes or carriage returns, "0";
- another exit: the output as it is, "Error: Exit code N";
- exit 124 (its timeout): "The command took too long to execute (>Ts)", "-1";
- an exception: "Error: repr(e)", "-1".

Here the timeout is the sandbox's own (the command and what it started
are stopped, and it exits 124 as ``timeout(1)`` does), so a command that
outlives it is never left running.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ._files import copy_in

CMD_TIMEOUT = 120
DOCKER_PATH = "/root/.venv/bin:/root/.local/bin:/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_COLOURS = re.compile(r"\x1b\[[0-9;]*m|\r")


class R2EGymRuntime:
    """R2E-Gym's ``DockerRuntime`` over a sandbox held from a fleet::

        with fleet.acquire(row["instance_id"]) as sb:
            runtime = R2EGymRuntime(sb, ds=row)
            out, code = runtime.run("python -m pytest -x", timeout=300)

    ``ds`` is the task's dataset row (R2E-Gym's ``ds``), used for the task
    instruction; the sandbox, not the row, decides the image.
    """

    def __init__(self, handle, ds: dict | None = None, repo_path: str = "/testbed", alt_path: str = "/root",
                 path: str = DOCKER_PATH, **_ignored: Any):
        self.handle = handle
        self.ds = dict(ds or {})
        self.repo_path = repo_path
        self.alt_path = alt_path
        self.path = path
        self.docker_image = getattr(handle, "image", "") or self.ds.get("docker_image", "")
        self.current_commit = ""

    def _exec(self, code: str, timeout: int, args: str, workdir: str | None, merge: bool, stdin: str | None = None):
        command = f"{code} {args}"
        argv = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh", "/bin/sh", "-c", command] if merge else ["/bin/sh", "-c", command]
        return self.handle.exec(argv, stdin=stdin, timeout=timeout, cwd=workdir or self.repo_path, env={"PATH": self.path})

    def run(self, code: str, timeout: int = CMD_TIMEOUT, args: str = "", workdir: str | None = None,
            type: str | None = None) -> tuple[str, str]:
        """Runs ``code args`` with sh and returns ``(output, error_code)`` as
        R2E-Gym's runtime does."""
        return self._run(code, timeout, args, workdir)

    def _run(self, code: str, timeout: int = CMD_TIMEOUT, args: str = "", workdir: str | None = None,
             stdin: str | None = None) -> tuple[str, str]:
        try:
            r = self._exec(code, timeout, args, workdir, merge=True, stdin=stdin)
        except Exception as e:  # as R2E-Gym's: the agent sees what went wrong
            return f"Error: {e!r}", "-1"
        output = r.stdout.decode("utf-8", errors="replace")
        if r.timed_out or r.exit_code == 124:
            return f"The command took too long to execute (>{timeout}s)", "-1"
        if r.exit_code != 0:
            return output, f"Error: Exit code {r.exit_code}"
        return _COLOURS.sub("", output), "0"

    def demux_run(self, code: str, timeout: int = CMD_TIMEOUT, args: str = "",
                  workdir: str | None = None) -> tuple[str, str, str]:
        """As ``run``, with stdout and stderr apart: ``(stdout, stderr, error_code)``."""
        try:
            r = self._exec(code, timeout, args, workdir, merge=False)
        except Exception as e:
            return f"Error: {e!r}", f"Error: {e!r}", "-1"
        stdout = r.stdout.decode("utf-8", errors="replace")
        stderr = r.stderr.decode("utf-8", errors="replace")
        if r.exit_code != 0:
            return stdout, stderr, f"Error: Exit code {r.exit_code}"
        return stdout, stderr, "0"

    def copy_to_container(self, src_path: str, dest_path: str) -> None:
        """Copies a local file or tree to dest_path in the sandbox."""
        copy_in(self.handle, src_path, dest_path)

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

    def create_file(self, file_path: str, content: str) -> None:
        self.handle.write_file("/" + file_path.lstrip("/"), content)

    # The patch goes to git apply's stdin: no file of it is left behind.
    def apply_patch(self, patch: str) -> tuple[str, str]:
        return self._run("git apply --whitespace=fix", stdin=patch)

    def reverse_patch(self, patch: str) -> tuple[str, str]:
        return self._run("git apply -R", stdin=patch)

    def start_new_branch(self, branch_name: str = "exp") -> tuple[str, str]:
        self.run("git config --global user.email 'you@example.com'")
        self.run("git config --global user.name 'Your Name'")
        output, error_code = self.run("git rev-parse HEAD")
        self.current_commit = output.strip()
        return output, error_code

    def commit_after_step(self, step_idx: int) -> tuple[str, str]:
        self.run("git add .")
        return self.run(f"git commit -m {shlex.quote(str(step_idx))}")

    def undo_last_commit(self) -> tuple[str, str]:
        return self.run("git reset --hard HEAD~1")

    def get_current_commit_hash(self) -> str:
        output, _ = self.run("git rev-parse HEAD")
        return output.strip()

    def soft_git_reset(self) -> tuple[str, str]:
        return self.run(f"git reset --soft {self.current_commit}")

    def get_task_instruction(self) -> str:
        return self.ds.get("problem_statement", "")

    def reset(self) -> None:
        """Nothing to restart: release the sandbox with ``reuse=True`` to
        have the fleet reset it (``serve --recycle``)."""

    def close(self) -> None:
        """Nothing: the sandbox is the fleet's, released by whoever acquired it."""
