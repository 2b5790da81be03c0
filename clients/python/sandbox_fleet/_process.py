"""Processes started in a sandbox and driven while they run
(``Handle.start``), sync and asyncio."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from typing import TYPE_CHECKING, Any

from ._commands import _Event, _events_of, _output, _seconds, _signal_name
from ._connect import b64

if TYPE_CHECKING:
    from ._handle import AsyncHandle, Handle


class Process:
    """A process started in a sandbox (``Handle.start``)."""

    def __init__(self, handle: Handle, pid: str):
        self.handle: Handle = handle
        self.id = pid
        self.exit_code: int | None = None

    def _msg(self) -> dict[str, Any]:
        return self.handle._ref(process=self.id)

    def events(self, start: int = 0) -> Iterator[tuple[str, bytes | int]]:
        """Its output from the start (or the ``start``-th event), as it
        comes: ``("stdout", bytes)``, ``("stderr", bytes)``, last
        ``("exit", code)``."""
        msg = {**self._msg(), "from": start}
        for kind, data in _output(self.handle.fleet._t.server_stream("ProcessEvents", msg, timeout=None)):
            if kind == "exit":
                self.exit_code = int(data)
            yield kind, data

    def write_stdin(self, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        self.handle.fleet._t.unary("WriteStdin", {**self._msg(), "data": b64(raw)})

    def close_stdin(self) -> None:
        self.handle.fleet._t.unary("WriteStdin", {**self._msg(), "close": True})

    def signal(self, sig: int | str) -> None:
        """Sends sig (``signal.SIGINT``, ``"SIGTERM"``, ``"KILL"``, ...) to the
        process and what it started."""
        self.handle.fleet._t.unary("Signal", {**self._msg(), "signal": _signal_name(sig)})

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ends; TimeoutError when it still runs after
        ``timeout`` seconds (None: as long as it takes)."""
        while True:
            step = 60.0 if timeout is None else timeout
            out = self.handle.fleet._t.unary("Wait", {**self._msg(), "timeout": _seconds(step)}, timeout=step + 30)
            if out.get("done"):
                self.exit_code = int(out.get("exitCode", 0))
                return self.exit_code
            if timeout is not None:
                raise TimeoutError(f"process {self.id} in sandbox {self.handle.id} still runs after {timeout}s")


class AsyncProcess:
    """A process started in a sandbox (``AsyncHandle.start``), as Process."""

    def __init__(self, handle: AsyncHandle, pid: str):
        self.handle: AsyncHandle = handle
        self.id = pid
        self.exit_code: int | None = None

    def _msg(self) -> dict[str, Any]:
        return self.handle.handle._ref(process=self.id)

    async def events(self, start: int = 0) -> AsyncGenerator[_Event, None]:
        async for m in self.handle._t.server_stream("ProcessEvents", {**self._msg(), "from": start}):
            for kind, data in _events_of(m):
                if kind == "exit":
                    self.exit_code = int(data)
                yield kind, data

    async def write_stdin(self, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        await self.handle._t.unary("WriteStdin", {**self._msg(), "data": b64(raw)})

    async def close_stdin(self) -> None:
        await self.handle._t.unary("WriteStdin", {**self._msg(), "close": True})

    async def signal(self, sig: int | str) -> None:
        await self.handle._t.unary("Signal", {**self._msg(), "signal": _signal_name(sig)})

    async def wait(self, timeout: float | None = None) -> int:
        while True:
            step = 60.0 if timeout is None else timeout
            out = await self.handle._t.unary("Wait", {**self._msg(), "timeout": _seconds(step)}, timeout=step + 30)
            if out.get("done"):
                self.exit_code = int(out.get("exitCode", 0))
                return self.exit_code
            if timeout is not None:
                raise TimeoutError(f"process {self.id} in sandbox {self.handle.id} still runs after {timeout}s")
