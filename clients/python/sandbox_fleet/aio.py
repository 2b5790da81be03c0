"""The asyncio client: the synchronous client's calls run in worker threads,
so an event loop never blocks on the network."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from .client import ExecResult, Handle, SandboxFleet


class AsyncHandle:
    """A sandbox held through AsyncSandboxFleet; ``async with`` releases it."""

    def __init__(self, fleet: "AsyncSandboxFleet", handle: Handle):
        self._fleet = fleet
        self.handle = handle

    def __getattr__(self, name):
        return getattr(self.handle, name)

    async def exec(self, argv, **kw) -> ExecResult:
        return await asyncio.to_thread(self.handle.exec, argv, **kw)

    async def is_alive(self) -> bool:
        return await asyncio.to_thread(self.handle.is_alive)

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> int:
        return await asyncio.to_thread(self.handle.write_file, path, data, mode)

    async def write_files(self, directory: str, files: Mapping[str, bytes | str]) -> int:
        return await asyncio.to_thread(self.handle.write_files, directory, files)

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self.handle.read_file, path)

    async def read_files(self, paths: Iterable[str]) -> dict[str, bytes]:
        return await asyncio.to_thread(self.handle.read_files, list(paths))

    async def release(self, reuse: bool = False) -> str:
        return await self._fleet.release(self, reuse=reuse)

    async def __aenter__(self) -> "AsyncHandle":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.release()


class AsyncSandboxFleet:
    """SandboxFleet for asyncio trainers: the same methods, awaited."""

    def __init__(self, address: str, **kw):
        self.sync = SandboxFleet(address, **kw)

    @property
    def client_id(self) -> str:
        return self.sync.client_id

    async def add_tasks(self, tasks: Iterable[Mapping]) -> dict:
        return await asyncio.to_thread(self.sync.add_tasks, list(tasks))

    async def lookahead(self, tasks_or_images: Iterable) -> list[dict]:
        return await asyncio.to_thread(self.sync.lookahead, list(tasks_or_images))

    async def wait_pools_ready(self, timeout: float = 600.0, images: Iterable[str] = ()) -> dict:
        return await asyncio.to_thread(self.sync.wait_pools_ready, timeout, list(images))

    async def acquire(self, task_id=None, image: str | None = None, timeout: float | None = None) -> AsyncHandle:
        return AsyncHandle(self, await asyncio.to_thread(self.sync.acquire, task_id, image, timeout))

    async def release(self, handle, reuse: bool = False) -> str:
        h = handle.handle if isinstance(handle, AsyncHandle) else handle
        return await asyncio.to_thread(self.sync.release, h, reuse)

    async def status(self) -> dict:
        return await asyncio.to_thread(self.sync.status)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)
