"""Long-lived shells in a sandbox (``Handle.shell``), sync and asyncio."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterator
from typing import TYPE_CHECKING, Any

from ._commands import MAX_OUTPUT, ExecResult, _acollect, _Event, _collect, _events_of, _failed, _output, _seconds
from .errors import TaskError

if TYPE_CHECKING:
    from ._handle import AsyncHandle, Handle


class Shell:
    """A named long-lived shell in a sandbox (``Handle.shell``)."""

    def __init__(self, handle: Handle, name: str):
        self.handle: Handle = handle
        self.name = name

    def _msg(self) -> dict[str, Any]:
        return self.handle._ref(shell=self.name)

    def _run_msg(self, script: str, timeout: float | None, merge_stderr: bool) -> dict[str, Any]:
        msg: dict[str, Any] = {**self._msg(), "script": script}
        if timeout:
            msg["timeout"] = _seconds(timeout)
        if merge_stderr:
            msg["mergeStderr"] = True
        return msg

    def run_stream(self, script: str, timeout: float | None = None,
                   merge_stderr: bool = False) -> Iterator[tuple[str, bytes | int | bool]]:
        """Runs script in the shell and yields its output as it comes, as
        ``Handle.exec_stream`` does."""
        msg = self._run_msg(script, timeout, merge_stderr)
        yield from _output(self.handle.fleet._t.server_stream("ShellRun", msg, timeout=None))

    def run(self, script: str, timeout: float | None = None, merge_stderr: bool = False,
            check: bool = False, max_output: int = MAX_OUTPUT) -> ExecResult:
        """Runs script (shell text) in the shell. Past ``timeout`` seconds it
        is interrupted, then killed, and returned with ``timed_out`` and exit
        code 124; the shell stays usable. ``merge_stderr`` interleaves stderr
        into stdout as written. A script that runs ``exit`` closes the shell.
        Past ``max_output`` bytes of output it is stopped and OutputTooLarge
        raised.
        """
        return self._checked(_collect(self.run_stream(script, timeout=timeout, merge_stderr=merge_stderr), max_output), script, check)

    def _checked(self, result: ExecResult, script: str, check: bool) -> ExecResult:
        if check and not result.ok:
            raise TaskError(f"{script!r} {_failed(result)} in shell {self.name} of {self.handle.id}",
                            result.exit_code, result.stdout, result.stderr)
        return result

    def interrupt(self) -> None:
        """Sends SIGINT to what the shell runs now, as Ctrl-C: a command that
        does not handle it ends with 130, and the shell stays."""
        self.handle.fleet._t.unary("ShellInterrupt", self._msg())

    def close(self) -> None:
        self.handle.fleet._t.unary("CloseShell", self._msg())

    def __enter__(self) -> "Shell":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncShell:
    """A named long-lived shell (``AsyncHandle.shell``), as Shell."""

    def __init__(self, handle: AsyncHandle, name: str):
        self.handle: AsyncHandle = handle
        self.name = name
        self._sync = Shell(handle.handle, name)

    async def run_stream(self, script: str, timeout: float | None = None,
                         merge_stderr: bool = False) -> AsyncGenerator[_Event, None]:
        async with contextlib.aclosing(self.handle._t.server_stream("ShellRun", self._sync._run_msg(script, timeout, merge_stderr))) as stream:
            async for m in stream:
                for e in _events_of(m):
                    yield e

    async def run(self, script: str, timeout: float | None = None, merge_stderr: bool = False, check: bool = False,
                  max_output: int = MAX_OUTPUT) -> ExecResult:
        result = await _acollect(self.run_stream(script, timeout=timeout, merge_stderr=merge_stderr), max_output)
        return self._sync._checked(result, script, check)

    async def interrupt(self) -> None:
        await self.handle._t.unary("ShellInterrupt", self._sync._msg())

    async def close(self) -> None:
        await self.handle._t.unary("CloseShell", self._sync._msg())

    async def __aenter__(self) -> "AsyncShell":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
