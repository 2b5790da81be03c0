"""SWE-ReX's runtime and deployment over a fleet sandbox, so that SWE-agent
(which drives a SWE-ReX deployment) runs its episodes in a sandbox held
from a fleet instead of a Docker container it starts itself.

Read from SWE-ReX's source (github.com/SWE-agent/SWE-ReX at 5c995c3,
v1.4.0+18): src/swerex/runtime/abstract.py (the requests and responses),
src/swerex/runtime/local.py (what each call does in the container) and
src/swerex/exceptions.py; and from how SWE-agent calls it
(github.com/SWE-agent/SWE-agent at 3ea751c: sweagent/environment/swe_env.py
and sweagent/agent/agents.py): every call is ``asyncio.run(...)`` of one
coroutine; a command past its timeout raises ``CommandTimeoutError``, after
which the agent sends a ``BashInterruptAction``; a command that is not
valid bash raises ``BashIncorrectSyntaxError`` before anything of it runs
(the agent asks the model again); ``check="raise"`` raises
``NonZeroExitCodeError``; a missing session is ``SessionDoesNotExistError``.

What differs from SWE-ReX's own bash session: a session here is one of the
sandbox's named shells (``Handle.shell``), which has no terminal — output
comes as the programs write it to a pipe, and interactive programs
(``is_interactive_command``) are refused; a command past its timeout is
stopped in the sandbox, with what it started, and the session keeps its
state (SWE-ReX leaves it running until the interrupt).

Run against SWE-ReX's real code: its own tests/test_execution.py (at
5c995c3), its ``remote_runtime`` and ``runtime_with_default_session``
fixtures giving this runtime over a FakeFleet sandbox, with SWE-ReX's
request, response and exception classes: 43 of its 49 tests pass. The
six that cannot: test_read_write_file and test_read_large_file read or
write this machine's ``tmp_path`` through the runtime (a sandbox is
another machine); test_run_in_shell_interactive_command and its timeout
variant need a terminal (refused here, as said above), as does
test_interrupt_pager (``less`` does not wait without one);
test_bash_multiline_command_eof runs ``python``, which the fake's image
(this machine's /usr) has only as ``python3``.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from .._handle import Handle
from .._shell import Shell

from ._files import copy_in

if TYPE_CHECKING:
    from ._swerex_types import (BashIncorrectSyntaxError, BashObservation, CloseBashSessionResponse, CloseResponse,
                                CommandResponse, CommandTimeoutError, CreateBashSessionResponse, DeploymentNotStartedError,
                                IsAliveResponse, NonZeroExitCodeError, ReadFileResponse, SessionDoesNotExistError,
                                SessionExistsError, SwerexException, UploadResponse, WriteFileResponse)
else:
    try:
        # Raise SWE-ReX's own classes where it is installed: SWE-agent catches them.
        from swerex.exceptions import (BashIncorrectSyntaxError, CommandTimeoutError, DeploymentNotStartedError,
                                       NonZeroExitCodeError, SessionDoesNotExistError, SessionExistsError, SwerexException)
        from swerex.runtime.abstract import (BashObservation, CloseBashSessionResponse, CloseResponse, CommandResponse,
                                             CreateBashSessionResponse, IsAliveResponse, ReadFileResponse, UploadResponse,
                                             WriteFileResponse)
    except ImportError:
        from ._swerex_types import (BashIncorrectSyntaxError, BashObservation, CloseBashSessionResponse, CloseResponse,
                                    CommandResponse, CommandTimeoutError, CreateBashSessionResponse,
                                    DeploymentNotStartedError, IsAliveResponse, NonZeroExitCodeError, ReadFileResponse,
                                    SessionDoesNotExistError, SessionExistsError, SwerexException, UploadResponse,
                                    WriteFileResponse)


_P = ParamSpec("_P")
_T = TypeVar("_T")

_ANSI = re.compile(r"\x1B[@-_][0-?]*[ -/]*[@-~]")


def _text(data: bytes) -> str:
    """Output as SWE-ReX's session returns it: decoded with backslash
    escapes, control sequences and carriage returns taken out."""
    return _ANSI.sub("", data.decode("utf-8", errors="backslashreplace")).replace("\r\n", "\n")


class SweRexRuntime:
    """SWE-ReX's ``AbstractRuntime`` over a sandbox held from a fleet. Each
    method is a coroutine taking SWE-ReX's request (any object with its
    fields) and returning its response; the blocking calls run in a thread,
    so each ``asyncio.run`` SWE-agent makes works on its own loop."""

    def __init__(self, handle: Handle):
        self.handle = handle
        self._sessions: dict[str, Shell] = {}

    async def _call(self, fn: Callable[_P, _T], *args: _P.args, **kw: _P.kwargs) -> _T:
        return await asyncio.to_thread(fn, *args, **kw)

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        reason = await self._call(self.handle.alive_reason)
        return IsAliveResponse(is_alive=reason is None, message=reason or "")

    async def create_session(self, request: Any) -> CreateBashSessionResponse:
        name = getattr(request, "session", "default")
        if name in self._sessions:
            raise SessionExistsError(f"session {name} already exists")
        return await self._call(self._create, name, list(getattr(request, "startup_source", []) or []),
                                getattr(request, "startup_timeout", 1.0))

    def _create(self, name: str, sources: list[str], timeout: float) -> CreateBashSessionResponse:
        shell = self.handle.shell(name)
        self._sessions[name] = shell
        if not sources:
            return CreateBashSessionResponse()
        # As SWE-ReX sources them: a missing file is a message, not a failure.
        r = shell.run(" ; ".join(f"source {shlex.quote(p)}" for p in sources), timeout=timeout, merge_stderr=True)
        return CreateBashSessionResponse(output=_text(r.stdout))

    def _session(self, name: str) -> Shell:
        if name not in self._sessions:
            raise SessionDoesNotExistError(f"session {name!r} does not exist")
        return self._sessions[name]

    async def run_in_session(self, action: Any) -> BashObservation:
        shell = self._session(getattr(action, "session", "default"))
        if getattr(action, "action_type", "bash") == "bash_interrupt":
            await self._call(shell.interrupt)
            return BashObservation(output="", exit_code=0)
        if getattr(action, "is_interactive_command", False) or getattr(action, "is_interactive_quit", False):
            raise SwerexException("interactive commands need a terminal, which a sandbox's shell does not have: "
                                  "run the program with its input instead (a heredoc or a file)")
        return await self._call(self._run, shell, action)

    def _run(self, shell: Shell, action: Any) -> BashObservation:
        command = action.command
        # SWE-ReX checks the whole command with bash -n before running any of it.
        checked = shell.run(f"printf '%s\\n' {shlex.quote(command)} | bash -n")
        if checked.exit_code != 0:
            stdout, stderr = _text(checked.stdout), _text(checked.stderr)
            raise BashIncorrectSyntaxError(
                f"Error (exit code {checked.exit_code}) while checking bash command \n{command!r}\n"
                f"---- Stderr ----\n{stderr}\n---- Stdout ----\n{stdout}",
                extra_info={"bash_stdout": stdout, "bash_stderr": stderr})
        timeout = getattr(action, "timeout", None)
        r = shell.run(command, timeout=timeout, merge_stderr=True)
        if r.timed_out:
            raise CommandTimeoutError(f"timeout after {timeout} seconds while running command {command!r}")
        output = _text(r.stdout)
        check = getattr(action, "check", "raise")
        if check == "ignore":
            return BashObservation(output=output, exit_code=None)
        if check == "raise" and r.exit_code != 0:
            msg = f"Command {command!r} failed with exit code {r.exit_code}. Here is the output:\n{output!r}"
            if getattr(action, "error_msg", ""):
                msg = f"{action.error_msg}: {msg}"
            raise NonZeroExitCodeError(msg)
        return BashObservation(output=output, exit_code=r.exit_code)

    async def close_session(self, request: Any) -> CloseBashSessionResponse:
        shell = self._session(getattr(request, "session", "default"))
        del self._sessions[shell.name]
        await self._call(shell.close)
        return CloseBashSessionResponse()

    async def execute(self, command: Any) -> CommandResponse:
        """Runs a command apart from every session, as ``subprocess.run``
        would: a list is the argv, a string with ``shell=True`` is sh text;
        ``env``, when given, is the whole environment."""
        return await self._call(self._execute, command)

    def _execute(self, command: Any) -> CommandResponse:
        argv = command.command
        if getattr(command, "shell", False):
            argv = ["/bin/sh", "-c", argv if isinstance(argv, str) else shlex.join(argv)]
        elif isinstance(argv, str):
            argv = [argv]
        env = getattr(command, "env", None)
        if env is not None:
            argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        if getattr(command, "merge_output_streams", False):
            argv = ["sh", "-c", 'exec "$@" 2>&1', "sh", *argv]
        timeout = getattr(command, "timeout", None)
        r = self.handle.exec(argv, timeout=timeout, cwd=getattr(command, "cwd", None))
        if r.timed_out:
            raise CommandTimeoutError(f"Timeout ({timeout}s) exceeded while running command")
        out = CommandResponse(stdout=r.stdout.decode(errors="backslashreplace"),
                              stderr=r.stderr.decode(errors="backslashreplace"), exit_code=r.exit_code)
        if getattr(command, "check", False) and r.exit_code != 0:
            msg = (f"Command {command.command!r} failed with exit code {r.exit_code}. "
                   f"Stdout:\n{out.stdout!r}\nStderr:\n{out.stderr!r}")
            if getattr(command, "error_msg", ""):
                msg = f"{command.error_msg}: {msg}"
            raise NonZeroExitCodeError(msg)
        return out

    async def read_file(self, request: Any) -> ReadFileResponse:
        data = await self._call(self._read, request.path)
        return ReadFileResponse(content=data.decode(getattr(request, "encoding", None) or "utf-8",
                                                    getattr(request, "errors", None) or "strict"))

    def _read(self, path: str) -> bytes:
        if not self.handle.exists(path):
            raise FileNotFoundError(f"No such file or directory: {path!r}")
        return self.handle.read_file(path)

    async def write_file(self, request: Any) -> WriteFileResponse:
        await self._call(self._write, request.path, request.content)
        return WriteFileResponse()

    def _write(self, path: str, content: str) -> None:
        # As SWE-ReX's mkdir(parents=True) and Path.write_text: parents
        # made, an existing file rewritten in place (its mode kept: a
        # script stays executable), a new one made with the umask's mode.
        self.handle.exec(["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "sh", path],
                         stdin=content.encode(), check=True)

    async def upload(self, request: Any) -> UploadResponse:
        """Copies a local file or tree to target_path in the sandbox."""
        await self._call(copy_in, self.handle, request.source_path, request.target_path)
        return UploadResponse()

    async def close(self) -> CloseResponse:
        """Closes the sessions; the sandbox stays the fleet's, released by
        whoever acquired it."""
        shells, self._sessions = list(self._sessions.values()), {}
        for shell in shells:
            await self._call(shell.close)
        return CloseResponse()


class SweRexDeployment:
    """A SWE-ReX deployment whose runtime is a fleet sandbox's: hand it to
    SWE-agent's ``SWEEnv(deployment=...)``. ``start`` has nothing to start
    (the fleet warmed and claimed the sandbox); ``stop`` closes the
    runtime's sessions and leaves the sandbox to whoever acquired it."""

    def __init__(self, handle: Handle):
        self.handle = handle
        self.hooks: list[Any] = []
        self._runtime: SweRexRuntime | None = None

    def add_hook(self, hook: Any) -> None:
        self.hooks.append(hook)

    async def start(self, *args: Any, **kwargs: Any) -> None:
        if self._runtime is None:
            self._runtime = SweRexRuntime(self.handle)

    async def stop(self, *args: Any, **kwargs: Any) -> None:
        if self._runtime is not None:
            await self._runtime.close()
            self._runtime = None

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        return await self.runtime.is_alive(timeout=timeout)

    @property
    def runtime(self) -> SweRexRuntime:
        if self._runtime is None:
            raise DeploymentNotStartedError()
        return self._runtime
