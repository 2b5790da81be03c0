"""mini-swe-agent's environment over a fleet sandbox: the one its agents
(and SkyRL's SWE example) call, in place of its DockerEnvironment.

Read from mini-swe-agent's source (github.com/SWE-agent/mini-swe-agent):
src/minisweagent/environments/docker.py and src/minisweagent/__init__.py
at v1.9.1 (e36161b) and at v2.4.6 (a83fcae). Both run each command as
``docker exec -w CWD -e K=V ... bash -lc COMMAND`` with stderr merged into
stdout, decoded as UTF-8 with replacement, and return ``{"output",
"returncode"}``. They differ in the call and in a timeout:

- v1: ``execute(command: str, cwd="")``; a command past the timeout
  raises ``subprocess.TimeoutExpired`` — from ``subprocess.run``, so its
  ``output`` is the bytes read so far, or None when there were none (the
  agent does ``e.output.decode("utf-8", errors="replace") if e.output``
  and shows the model its timeout template with it);
- v2: ``execute(action: dict, cwd="", *, timeout=None)``, the command in
  ``action["command"]``; a timeout is returned, not raised: returncode -1,
  ``exception_info`` and ``extra`` saying what happened. v2 raises
  ``Submitted`` when the output's first line is
  ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (v1's agent checks that
  itself).

This environment takes either call and answers as that version does,
type for type; the exception's command is the user's (``bash -lc
COMMAND``, the interpreter and the command, without docker's own words).
``forward_env`` forwards the trainer's variables that are set, and ``env``
wins over it, as in DockerEnvironmentConfig. Here a timed-out command is
also stopped in the sandbox, with what it started, which ``docker exec``
under ``subprocess.run(timeout=...)`` does not do.

Run against mini-swe-agent's real code (its source at the tags above, on
FakeFleet): v1.9.1's ``DefaultAgent.run`` with its ``DeterministicModel``
(look, a command past its timeout — the timeout template shows the
output so far — fix, submit: ``Submitted`` with the fix) and v2.4.6's
``DefaultAgent.run`` with its ``DeterministicModel`` and ``make_output``
(the same task, ``exit_status`` ``Submitted``, the timeout's
``exception_info`` naming ``bash -lc`` and the command). Both passed.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .._handle import Handle

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class _Submitted(Exception):
    """Stands in for minisweagent.exceptions.Submitted when mini-swe-agent is
    not installed: raised with the exit message, as v2 raises it."""

    def __init__(self, *messages: dict[str, Any]):
        self.messages = messages
        super().__init__()


if TYPE_CHECKING:
    Submitted = _Submitted
else:
    try:
        # The agent that catches it is mini-swe-agent's: raise its own class.
        from minisweagent.exceptions import Submitted
    except ImportError:
        Submitted = _Submitted


@dataclass
class MiniSweConfig:
    """The fields of mini-swe-agent's DockerEnvironmentConfig that mean
    something here (the image is the sandbox's)."""

    image: str = ""
    cwd: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    forward_env: list[str] = field(default_factory=list)
    timeout: int = 30
    interpreter: list[str] = field(default_factory=lambda: ["bash", "-lc"])

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        return asdict(self)


class MiniSweEnvironment:
    """A mini-swe-agent environment whose commands run in a sandbox held
    from a fleet (``SandboxFleet.acquire`` or FakeFleet's)::

        with fleet.acquire(task) as sb:
            env = MiniSweEnvironment(sb, cwd="/testbed", timeout=60)
            agent = DefaultAgent(model, env, **agent_config)
            agent.run(task["problem_statement"])
    """

    def __init__(self, handle: Handle, *, cwd: str = "/", env: dict[str, str] | None = None, timeout: int = 30,
                 interpreter: list[str] | None = None, forward_env: list[str] | None = None, **_ignored: Any):
        self.handle = handle
        self.config = MiniSweConfig(image=getattr(handle, "image", ""), cwd=cwd, env=dict(env or {}),
                                    forward_env=list(forward_env or []), timeout=timeout,
                                    interpreter=list(interpreter or ["bash", "-lc"]))

    def _environment(self) -> dict[str, str]:
        """What ``docker exec -e`` sets: the forwarded variables that are
        set here, then ``env``, which wins."""
        forwarded = {k: v for k in self.config.forward_env if (v := os.getenv(k)) is not None}
        return {**forwarded, **self.config.env}

    def execute(self, action: str | dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Runs the command (v1: a string; v2: ``action["command"]``) and
        returns ``{"output", "returncode"}`` as that version does."""
        v2 = isinstance(action, dict)
        command = str(action.get("command", "")) if isinstance(action, dict) else action
        limit = timeout or self.config.timeout
        shown = [*self.config.interpreter, command]
        # stderr interleaved into stdout as written, as stderr=STDOUT does.
        argv = ["sh", "-c", 'exec "$@" 2>&1', "sh", *shown]
        r = self.handle.exec(argv, cwd=cwd or self.config.cwd, env=self._environment() or None, timeout=limit)
        output = r.stdout.decode("utf-8", errors="replace")
        if r.timed_out:
            # As subprocess.run raises it: the bytes read so far, or None.
            err = subprocess.TimeoutExpired(shown, limit, output=r.stdout or None)
            if not v2:
                raise err
            out = {"output": output, "returncode": -1,
                   "exception_info": f"An error occurred while executing the command: {err}",
                   "extra": {"exception_type": type(err).__name__, "exception": str(err)}}
        else:
            out = {"output": output, "returncode": r.exit_code}
            if v2:
                out["exception_info"] = ""
        if v2:
            self._check_finished(out)
        return out

    def _check_finished(self, output: dict[str, Any]) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                                      "extra": {"exit_status": "Submitted", "submission": submission}})

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config.model_dump(), **platform.uname()._asdict(), "sandbox": self.handle.id, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": self.config.model_dump(mode="json"),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}

    def cleanup(self) -> None:
        """Nothing: the sandbox is the fleet's, released by whoever acquired it."""
