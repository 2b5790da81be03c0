"""A minimal Connect protocol client (JSON codec) over HTTP/1.1, on the
standard library alone: unary calls, server streams and client streams, over
a unix socket or TCP (optionally TLS with a bearer token). Connections are
kept alive and reused, one call at a time each; calls from many threads use
as many connections."""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import select
import socket
import ssl
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from . import tracecontext
from .errors import FleetError, InfraError, from_connect

if TYPE_CHECKING:
    from ._aconnect import AsyncCalls

SERVICE = "/sandboxfleet.fleet.v1.FleetService/"

# A stream of the session's messages; closing it closes its connection,
# which stops the call at the server.
Stream = Generator[dict[str, Any], None, None]


class Calls(Protocol):
    """What a client calls the session through: the HTTP Transport, or a
    fake one (sandbox_fleet.testing.FakeTransport)."""

    address: str

    def unary(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]: ...

    def server_stream(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> Stream: ...

    def client_stream(self, method: str, msgs: Iterable[dict[str, Any]], timeout: float | None = None) -> dict[str, Any]: ...

    def close(self) -> None: ...

    def asyncio(self) -> "AsyncCalls":
        """The same calls for asyncio, to the same session."""
        ...


# Connect streams wrap each message in an envelope: one flag byte and a
# four-byte big-endian length.
_END_STREAM = 0x02

# Idle connections kept per transport.
_MAX_IDLE = 16

# How long a call waits for a server that nothing listens for — one
# restarting, as `serve --resume` does — before it fails; and the longest
# pause between its tries.
RECONNECT = 60.0
_RECONNECT_PAUSE = 0.5


class Reconnect:
    """The tries of one call at a server that is not listening: such a call
    was never made, so it is made again once the server listens again,
    for ``within`` seconds at most."""

    def __init__(self, within: float):
        self.deadline = time.monotonic() + within
        self.pause = 0.02

    def wait(self) -> float | None:
        """The pause before the next try, or None when time is up."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return None
        pause, self.pause = min(self.pause, left), min(self.pause * 2, _RECONNECT_PAUSE)
        return pause


# The calls a server may receive twice to the same effect: reads, warming,
# and Acquire, whose request id makes a second one return the first one's
# sandbox. Any other call — an exec, a shell script, a process started, a
# file written, a release — whose connection broke after it was sent may
# have run, and is never sent again by the transport.
IDEMPOTENT = frozenset({"Acquire", "Alive", "Lookahead", "PlanRun", "ProcessEvents", "ReadFiles", "Renew", "Status", "Wait",
                        "WaitPoolsReady"})


def broken_after_sending(method: str, address: str, e: BaseException) -> InfraError:
    """The error of a call whose connection broke once it was sent."""
    return InfraError(f"{method}: the connection to the fleet session at {address} broke after the call was sent ({e}): "
                      "the session restarted or became unreachable; the call may have run, so it was not sent again",
                      "unavailable", "api")


def _dropped(sock: socket.socket | None) -> bool:
    """Whether an idle connection was closed by the server (it is readable:
    its end, or bytes nobody asked for)."""
    if sock is None:
        return True
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _not_listening(e: BaseException) -> bool:
    """Whether e says nothing listens at the address (a TCP port refused, a
    unix socket not there): the request was not sent."""
    return isinstance(e, (ConnectionRefusedError, FileNotFoundError))


def _loopback(host: str) -> bool:
    """Whether host names this machine's loopback (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


# The header carrying a client's key (serve binds each client id to the
# key of the first call naming it).
CLIENT_KEY_HEADER = "Sandbox-Fleet-Client-Key"


class Transport:
    """Calls one fleet session server. ``address`` is ``unix:///path``, a
    socket path, or ``http(s)://host:port``."""

    def __init__(self, address: str, token: str | None = None, timeout: float | None = None,
                 headers: dict[str, str] | None = None, reconnect: float = RECONNECT,
                 token_file: str | None = None, ca_file: str | None = None):
        self.address = address
        self.reconnect = reconnect
        self.token = token
        # A token file is read again whenever it changes: a Pod's projected
        # ServiceAccount token is rotated in place by the kubelet.
        self.token_file = token_file
        self._token_stamp: tuple[int, int] | None = None
        if token_file is not None:
            self._read_token()
        self.ssl_context = ssl.create_default_context(cafile=ca_file)
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._unix: str | None
        self._scheme, self._host, self._port = "http", "", None
        if address.startswith("unix://"):
            self._unix = address[len("unix://"):]
        elif address.startswith("/") or address.startswith("."):
            self._unix = address
        else:
            self._unix = None
            url = urllib.parse.urlsplit(address if "://" in address else "http://" + address)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError(f"address {address!r}: use unix:///PATH, a socket path, or http(s)://HOST:PORT")
            if url.scheme == "http" and (token or token_file) and not _loopback(url.hostname):
                raise ValueError(f"address {address!r}: a token over plain http would cross the network in the clear; "
                                 "use https:// (a serve with TLS, as manifests/serve runs it) or a unix socket")
            self._scheme, self._host, self._port = url.scheme, url.hostname, url.port

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self.ssl_context)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _read_token(self) -> None:
        assert self.token_file is not None
        st = os.stat(self.token_file)
        stamp = (st.st_mtime_ns, st.st_ino)
        if stamp != self._token_stamp:
            with open(self.token_file) as f:
                self.token = f.read().strip()
            self._token_stamp = stamp

    def _headers(self, content_type: str) -> dict[str, str]:
        if self.token_file is not None:
            self._read_token()
        h = {"Content-Type": content_type, "Connect-Protocol-Version": "1"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(self.headers)
        h.update(tracecontext.headers())
        return h

    def _take(self, timeout: float | None) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection the server has not closed (and True), or a
        new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connection(timeout), False
            if not _dropped(conn.sock):
                break
            conn.close()
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def _give(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        """Keeps conn for the next call once resp was read to its end."""
        if resp.will_close or not resp.isclosed():
            conn.close()
            return
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def asyncio(self) -> "AsyncCalls":
        from ._aconnect import AsyncTransport

        return AsyncTransport(self)

    def close(self) -> None:
        """Closes the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _send(self, method: str, body: bytes | Iterable[bytes], content_type: str, timeout: float | None,
              chunked: bool = False) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        tries = Reconnect(self.reconnect)
        while True:
            # A streamed body cannot be sent twice: it takes a new connection.
            conn, reused = (self._connection(timeout), False) if chunked else self._take(timeout)
            try:
                conn.request("POST", SERVICE + method, body=body, headers=self._headers(content_type), encode_chunked=chunked)
                return conn, conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                if reused and method in IDEMPOTENT:
                    # The server may have closed the idle connection before
                    # it read the request; if it did read it, a second one
                    # does no harm.
                    continue
                raise broken_after_sending(method, self.address, e) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if _not_listening(e) and (pause := tries.wait()) is not None:
                    time.sleep(pause)
                    continue
                raise InfraError(f"{method}: the fleet session at {self.address} did not answer: {e}", "unavailable", "api") from e

    def unary(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        conn, resp = self._send(method, json.dumps(msg).encode(), "application/json", timeout or self.timeout)
        try:
            body = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise InfraError(f"{method}: the connection broke: {e}", "unavailable", "api") from e
        self._give(conn, resp)
        if resp.status != 200:
            raise _unary_error(method, resp, body)
        return _message(body) if body else {}

    def server_stream(self, method: str, msg: dict[str, Any], timeout: float | None = None) -> Stream:
        body = _envelope(json.dumps(msg).encode())
        conn, resp = self._send(method, body, "application/connect+json", timeout or self.timeout)
        yield from _read_stream(method, conn, resp, self._give)

    def client_stream(self, method: str, msgs: Iterable[dict[str, Any]], timeout: float | None = None) -> dict[str, Any]:
        body = (_envelope(json.dumps(m).encode()) for m in msgs)
        conn, resp = self._send(method, body, "application/connect+json", timeout or self.timeout, chunked=True)
        out = None
        for m in _read_stream(method, conn, resp, self._give):
            out = m
        return out or {}


def _envelope(data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(data)) + data


def _message(data: bytes) -> dict[str, Any]:
    """A message of the session: a JSON object."""
    m = json.loads(data)
    if not isinstance(m, dict):
        raise InfraError(f"the fleet session sent {type(m).__name__}, not a message", "unavailable", "api")
    return m


def _read_exact(resp: http.client.HTTPResponse, n: int) -> bytes:
    data = resp.read(n)
    if len(data) != n:
        raise InfraError("the stream from the fleet session ended early", "unavailable", "api")
    return data


def _read_stream(method: str, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse,
                 give: Callable[[http.client.HTTPConnection, http.client.HTTPResponse], None]) -> Stream:
    ended = False
    try:
        if resp.status != 200:
            raise _unary_error(method, resp, resp.read())
        while True:
            head = resp.read(5)
            if not head:
                raise InfraError(f"{method}: the stream ended without its end message", "unavailable", "api")
            if len(head) < 5:
                head += _read_exact(resp, 5 - len(head))
            flags, size = struct.unpack(">BI", head)
            data = _read_exact(resp, size) if size else b""
            if flags & _END_STREAM:
                if not resp.read(1):
                    ended = True
                if err := _end_error(method, data):
                    raise err
                return
            yield _message(data)
    except (OSError, http.client.HTTPException) as e:
        raise InfraError(f"{method}: the connection broke: {e}", "unavailable", "api") from e
    finally:
        # A stream read to its end leaves the connection for the next call;
        # one left early (the caller stopped reading) is closed.
        if ended:
            give(conn, resp)
        else:
            conn.close()


def _end_error(method: str, data: bytes) -> FleetError | None:
    """The error an end-of-stream message carries, if any."""
    end = json.loads(data) if data else {}
    err = end.get("error")
    if not err:
        return None
    meta = {k.lower(): v[0] for k, v in (end.get("metadata") or {}).items() if v}
    return from_connect(err.get("code", "unknown"), f"{method}: {err.get('message', '')}", meta)


def _unary_error(method: str, resp: http.client.HTTPResponse, body: bytes) -> FleetError:
    try:
        err = json.loads(body)
    except ValueError:
        err = {"code": "unknown", "message": body.decode(errors="replace") or resp.reason}
    meta = {k.lower(): v for k, v in resp.getheaders()}
    return from_connect(err.get("code", "unknown"), f"{method}: {err.get('message', '')}", meta)
