"""The asyncio client seen through blocking calls, so that one test body
runs against SandboxFleet and AsyncSandboxFleet alike: every call of the
asyncio object (AsyncSandboxFleet, AsyncHandle, AsyncShell, AsyncProcess)
is awaited on one event loop in a thread of its own, its async streams are
read as iterators and its async context managers entered with ``with``.
Nothing of the client is replaced: the asyncio code does all the work."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from typing import Any

from sandbox_fleet import AsyncHandle, AsyncProcess, AsyncSandboxFleet, AsyncShell


class Loop:
    """An event loop running in a daemon thread until stop()."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="blocking-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


_ASYNC_OBJECTS = (AsyncSandboxFleet, AsyncHandle, AsyncShell, AsyncProcess)


def _in(value: Any) -> Any:
    """An argument as the asyncio object takes it: a Blocking unwrapped."""
    return value.target if isinstance(value, Blocking) else value


def is_fake(fleet: Any) -> bool:
    """Whether fleet is a fake one (FakeFleet or AsyncFakeFleet, seen
    blocking or not)."""
    from sandbox_fleet.testing import FakeSession

    return isinstance(getattr(fleet, "session", None), FakeSession)


class Blocking:
    """``target``, an asyncio object of the client, called synchronously."""

    def __init__(self, target: Any, loop: Loop):
        self._target, self._loop = target, loop

    @property
    def target(self) -> Any:
        return self._target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.ismethod(value) or inspect.isfunction(value):
            return lambda *args, **kw: self._out(value(*map(_in, args), **{k: _in(v) for k, v in kw.items()}))
        return self._out(value)

    def _out(self, value: Any) -> Any:
        if inspect.iscoroutine(value):
            return self._out(self._loop.run(value))
        if inspect.isasyncgen(value):
            return self._iterate(value)
        if isinstance(value, contextlib.AbstractAsyncContextManager) and not isinstance(value, _ASYNC_OBJECTS):
            return self._context(value)
        if isinstance(value, _ASYNC_OBJECTS):
            return Blocking(value, self._loop)
        return value

    def _iterate(self, agen: Any) -> Any:
        try:
            while True:
                try:
                    yield self._loop.run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run(agen.aclose())

    @contextlib.contextmanager
    def _context(self, cm: Any) -> Any:
        value = self._loop.run(cm.__aenter__())
        try:
            yield self._out(value)
        except BaseException as e:
            if not self._loop.run(cm.__aexit__(type(e), e, e.__traceback__)):
                raise
        else:
            self._loop.run(cm.__aexit__(None, None, None))

    def __enter__(self) -> "Blocking":
        self._loop.run(self._target.__aenter__())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.run(self._target.__aexit__(*exc))

    def __eq__(self, other: object) -> bool:
        return self._target == (other._target if isinstance(other, Blocking) else other)

    def __hash__(self) -> int:
        return hash(self._target)
