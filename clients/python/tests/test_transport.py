"""The transport: credentials, and which calls it sends again when a
connection breaks, against a stand-in server on loopback."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import pytest

from sandbox_fleet import FleetError, InfraError
from sandbox_fleet._aconnect import AsyncTransport
from sandbox_fleet._connect import Transport


def test_a_rotated_token_file_is_read_again(tmp_path):
    """A Pod's projected token is replaced in place by the kubelet (a new
    file renamed over the old): the next call sends the new token."""
    token = tmp_path / "token"
    token.write_text("first\n")
    t = Transport("https://sandbox-fleet-serve.rl.svc:7070", token_file=str(token))
    assert t._headers("application/json")["Authorization"] == "Bearer first"
    rotated = tmp_path / "token.new"
    rotated.write_text("second\n")
    os.replace(rotated, token)
    assert t._headers("application/json")["Authorization"] == "Bearer second"


def test_a_token_never_crosses_the_network_in_the_clear():
    for address in ("http://10.0.0.7:7070", "http://serve.rl.svc:7070", "serve.rl.svc:7070"):
        with pytest.raises(ValueError, match="in the clear"):
            Transport(address, token="t")
    for address in ("http://127.0.0.1:7070", "http://localhost:7070", "http://[::1]:7070", "https://serve.rl.svc:7070"):
        Transport(address, token="t")
    Transport("http://10.0.0.7:7070")  # no token, nothing to leak


class Server:
    """An HTTP/1.1 server on 127.0.0.1 standing for serve: it answers each
    request with {} on a kept-alive connection, except as ``plan`` says for
    the Nth request: ``"kill"`` reads it and closes the connection unanswered
    (serve SIGKILLed mid-call), ``"idle-close"`` answers it, then closes the
    connection (a server letting an idle connection go)."""

    def __init__(self, plan: dict[int, str]):
        self.plan, self.seen = plan, []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.address = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            f = conn.makefile("rb")
            while True:
                line = f.readline()
                if not line:
                    return
                headers = {}
                while (h := f.readline()) not in (b"\r\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                f.read(int(headers.get("content-length", 0)))
                self.seen.append(line.split()[1].decode().rsplit("/", 1)[1])
                what = self.plan.get(len(self.seen), "answer")
                if what == "kill":
                    return
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                if what == "idle-close":
                    return

    def close(self) -> None:
        self.sock.close()


def _calls(t, methods):
    """The results of the unary calls, in order: {} or the error raised."""
    out = []
    for m in methods:
        try:
            out.append(t.unary(m, {}))
        except FleetError as e:
            out.append(e)
        time.sleep(0.05)
    return out


def _acalls(t, methods):
    async def main():
        at = AsyncTransport(t)
        out = []
        for m in methods:
            try:
                out.append(await at.unary(m, {}))
            except FleetError as e:
                out.append(e)
            await asyncio.sleep(0.05)
        await at.close()
        return out
    return asyncio.run(main())


@pytest.mark.parametrize("calls", [_calls, _acalls], ids=["sync", "async"])
def test_a_call_that_may_have_run_is_not_sent_again(calls):
    """serve read an exec and died: the call raises InfraError, and the
    server saw it once."""
    s = Server({2: "kill"})
    try:
        first, second = calls(Transport(s.address, token="t", reconnect=0), ["Status", "Exec"])
        assert first == {}
        assert isinstance(second, InfraError) and "may have run" in str(second), second
        time.sleep(0.2)
        assert s.seen == ["Status", "Exec"]
    finally:
        s.close()


@pytest.mark.parametrize("calls", [_calls, _acalls], ids=["sync", "async"])
def test_a_read_is_sent_again(calls):
    s = Server({2: "kill"})
    try:
        assert calls(Transport(s.address, token="t", reconnect=0), ["Status", "Status"]) == [{}, {}]
        assert s.seen == ["Status", "Status", "Status"]
    finally:
        s.close()


@pytest.mark.parametrize("calls", [_calls, _acalls], ids=["sync", "async"])
def test_an_idle_connection_the_server_closed_is_not_used(calls):
    """A server lets an idle connection go: the next call, an exec, takes a
    new connection and runs once."""
    s = Server({1: "idle-close"})
    try:
        assert calls(Transport(s.address, token="t", reconnect=0), ["Status", "Exec"]) == [{}, {}]
        assert s.seen == ["Status", "Exec"]
    finally:
        s.close()
