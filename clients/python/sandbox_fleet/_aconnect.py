"""The Connect client of _connect.py for asyncio: the same calls over
asyncio streams, so an event loop waits on the network without a thread per
call, streams included. Connections are kept alive and reused; many calls
at once use as many connections."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncGenerator, Iterable
from typing import Any, Protocol

from ._connect import (_END_STREAM, _MAX_IDLE, IDEMPOTENT, SERVICE, Reconnect, Transport, _end_error, _envelope, _message,
                       _not_listening, broken_after_sending)
from .errors import FleetError, InfraError, from_connect

# A stream of the session's messages on the loop; closing it (aclose)
# closes its connection, which stops the call at the server.
AsyncStream = AsyncGenerator[dict[str, Any], None]


class AsyncCalls(Protocol):
    """What an asyncio client calls the session through: AsyncTransport,
    or a fake one (sandbox_fleet.testing.AsyncFakeTransport)."""

    async def unary(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]: ...

    def server_stream(self, method: str, msg: dict[str, Any]) -> AsyncStream:
        """The call's messages as they come, for as long as it takes."""
        ...

    async def client_stream(self, method: str, msgs: Iterable[dict[str, Any]]) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class _Response:
    """An HTTP/1.1 response being read: its status, headers and body."""

    def __init__(self, conn: _Conn, status: int, headers: dict[str, str]):
        self.conn, self.status, self.headers = conn, status, headers
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        self._left = int(headers["content-length"]) if "content-length" in headers else None
        self._buf = b""
        self.done = False
        self.keep = headers.get("connection", "").lower() != "close"

    async def _more(self) -> bool:
        """Reads the next piece of the body into the buffer; False at its end."""
        r = self.conn.reader
        if self.done:
            return False
        if self._chunked:
            size = int((await r.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await r.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self.done = True
                return False
            self._buf += await r.readexactly(size)
            await r.readexactly(2)
            return True
        if self._left is not None:
            if self._left == 0:
                self.done = True
                return False
            data = await r.read(min(self._left, 1 << 16))
            if not data:
                raise ConnectionResetError("the connection closed in the middle of the body")
            self._left -= len(data)
            self._buf += data
            return True
        data = await r.read(1 << 16)
        if not data:
            self.done, self.keep = True, False
            return False
        self._buf += data
        return True

    async def read(self, n: int) -> bytes:
        """Exactly n bytes of the body, or fewer at its end."""
        while len(self._buf) < n and await self._more():
            pass
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    async def read_all(self) -> bytes:
        while await self._more():
            pass
        out, self._buf = self._buf, b""
        return out


class AsyncTransport:
    """Calls the fleet session server of ``sync`` (a Transport: the address,
    token and timeout) from asyncio."""

    def __init__(self, sync: Transport):
        self.sync = sync
        self._idle: list[_Conn] = []

    async def _open(self) -> _Conn:
        t = self.sync
        if t._unix is not None:
            r, w = await asyncio.open_unix_connection(t._unix, limit=1 << 20)
        else:
            ctx = t.ssl_context if t._scheme == "https" else None
            r, w = await asyncio.open_connection(t._host, t._port or (443 if ctx else 80), ssl=ctx, limit=1 << 20)
        return _Conn(r, w)

    def _give(self, resp: _Response) -> None:
        if resp.done and resp.keep and not resp.conn.reader.at_eof() and len(self._idle) < _MAX_IDLE:
            self._idle.append(resp.conn)
        else:
            resp.conn.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def _head(self, method: str, content_type: str, length: int | None) -> bytes:
        host = "localhost" if self.sync._unix is not None else f"{self.sync._host}:{self.sync._port}"
        lines = [f"POST {SERVICE}{method} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k}: {v}" for k, v in self.sync._headers(content_type).items()]
        lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _send(self, method: str, content_type: str, body: bytes | None = None,
                    chunks: Iterable[bytes] | None = None) -> _Response:
        while True:
            # An idle connection the server closed meanwhile is let go.
            while self._idle and (self._idle[-1].reader.at_eof() or self._idle[-1].writer.is_closing()):
                self._idle.pop().close()
            reused = bool(self._idle) and chunks is None
            conn = self._idle.pop() if reused else await self._open_or_fail(method)
            try:
                w = conn.writer
                if chunks is None:
                    payload = body or b""
                    w.write(self._head(method, content_type, len(payload)) + payload)
                else:
                    w.write(self._head(method, content_type, None))
                    for c in chunks:
                        w.write(b"%x\r\n%s\r\n" % (len(c), c))
                        await w.drain()
                    w.write(b"0\r\n\r\n")
                await w.drain()
                status_line = await conn.reader.readline()
                if not status_line:
                    raise ConnectionResetError("the server closed the connection")
                status = int(status_line.split()[1])
                headers: dict[str, str] = {}
                while (line := await conn.reader.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = line.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                return _Response(conn, status, headers)
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                conn.close()
                if reused and method in IDEMPOTENT:
                    continue  # as the synchronous transport: only what may run twice
                raise broken_after_sending(method, self.sync.address, e) from e
            except (OSError, ValueError, IndexError) as e:
                conn.close()
                raise InfraError(f"{method}: the fleet session at {self.sync.address} did not answer: {e}", "unavailable", "api") from e

    async def _open_or_fail(self, method: str) -> _Conn:
        tries = Reconnect(self.sync.reconnect)
        while True:
            try:
                return await self._open()
            except OSError as e:
                if _not_listening(e) and (pause := tries.wait()) is not None:
                    await asyncio.sleep(pause)
                    continue
                raise InfraError(f"{method}: the fleet session at {self.sync.address} did not answer: {e}", "unavailable", "api") from e

    async def unary(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        timeout = timeout or self.sync.timeout
        try:
            return await asyncio.wait_for(self._unary(method, msg), timeout)
        except asyncio.TimeoutError:
            raise InfraError(f"{method}: the fleet session at {self.sync.address} did not answer within {timeout}s",
                             "deadline_exceeded", "api") from None

    async def _unary(self, method: str, msg: dict[str, Any]) -> dict[str, Any]:
        resp = await self._send(method, "application/json", body=json.dumps(msg).encode())
        try:
            body = await resp.read_all()
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as e:
            resp.conn.close()
            raise InfraError(f"{method}: the connection broke: {e}", "unavailable", "api") from e
        self._give(resp)
        if resp.status != 200:
            raise _error(method, resp.headers, body)
        return _message(body) if body else {}

    async def server_stream(self, method: str, msg: dict[str, Any]) -> AsyncStream:
        resp = await self._send(method, "application/connect+json", body=_envelope(json.dumps(msg).encode()))
        # Closed with this stream, so a caller that stops reading closes
        # the connection now, which stops the call at the server.
        async with contextlib.aclosing(self._read_stream(method, resp)) as stream:
            async for m in stream:
                yield m

    async def client_stream(self, method: str, msgs: Iterable[dict[str, Any]]) -> dict[str, Any]:
        resp = await self._send(method, "application/connect+json", chunks=(_envelope(json.dumps(m).encode()) for m in msgs))
        out = None
        async for m in self._read_stream(method, resp):
            out = m
        return out or {}

    async def _read_stream(self, method: str, resp: _Response) -> AsyncStream:
        ended = False
        try:
            if resp.status != 200:
                raise _error(method, resp.headers, await resp.read_all())
            while True:
                head = await resp.read(5)
                if not head:
                    raise InfraError(f"{method}: the stream ended without its end message", "unavailable", "api")
                if len(head) < 5:
                    raise InfraError("the stream from the fleet session ended early", "unavailable", "api")
                flags, size = struct.unpack(">BI", head)
                data = await resp.read(size) if size else b""
                if len(data) != size:
                    raise InfraError("the stream from the fleet session ended early", "unavailable", "api")
                if flags & _END_STREAM:
                    ended = not await resp.read(1)
                    if err := _end_error(method, data):
                        raise err
                    return
                yield _message(data)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as e:
            raise InfraError(f"{method}: the connection broke: {e}", "unavailable", "api") from e
        finally:
            if ended:
                self._give(resp)
            else:
                resp.conn.close()


def _error(method: str, headers: dict[str, str], body: bytes) -> FleetError:
    try:
        err = json.loads(body)
    except ValueError:
        err = {"code": "unknown", "message": body.decode(errors="replace")}
    return from_connect(err.get("code", "unknown"), f"{method}: {err.get('message', '')}", headers)
