"""Trace context on the calls: what the headers carry, in threads, asyncio
tasks and nested contexts, and on the wire. Debian ships no Python
OpenTelemetry, so its propagator is stood in for by a module of the same
name and interface."""

from __future__ import annotations

import asyncio
import http.server
import sys
import threading
import types

import pytest

from sandbox_fleet import SandboxFleet, new_traceparent, trace_context
from sandbox_fleet import tracecontext

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_traceparent_checked():
    for bad, why in [("", "not VERSION-TRACEID"), ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "lower-case"),
                     ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"),
                     ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", "trace id is all zeros"),
                     ("00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01", "parent id is all zeros")]:
        with pytest.raises(ValueError, match=why):
            with trace_context(bad):
                pass
    assert tracecontext.check_traceparent(new_traceparent()) != new_traceparent()
    assert new_traceparent(sampled=False).endswith("-00")


def test_headers_follow_the_context():
    assert tracecontext.headers() == {}
    with trace_context(TP, "vendor=1"):
        assert tracecontext.headers() == {"traceparent": TP, "tracestate": "vendor=1"}
        inner = new_traceparent()
        with trace_context(inner):
            assert tracecontext.headers() == {"traceparent": inner}
        assert tracecontext.headers()["traceparent"] == TP
        # Another thread starts with no context, as contextvars do.
        seen = []
        t = threading.Thread(target=lambda: seen.append(tracecontext.headers()))
        t.start()
        t.join()
        assert seen == [{}]
    assert tracecontext.headers() == {}


def test_asyncio_tasks_carry_their_own():
    async def call(tp):
        with trace_context(tp):
            await asyncio.sleep(0)
            # AsyncSandboxFleet's calls run in worker threads.
            return await asyncio.to_thread(tracecontext.headers)

    async def main():
        tps = [new_traceparent() for _ in range(4)]
        got = await asyncio.gather(*(call(tp) for tp in tps))
        assert [h["traceparent"] for h in got] == tps

    asyncio.run(main())


def test_opentelemetry_context_when_installed(monkeypatch):
    otel = types.ModuleType("opentelemetry")
    propagate = types.ModuleType("opentelemetry.propagate")
    propagate.inject = lambda carrier: carrier.update({"traceparent": TP, "baggage": "k=v", "other": "x"})
    otel.propagate = propagate
    monkeypatch.setitem(sys.modules, "opentelemetry", otel)
    monkeypatch.setitem(sys.modules, "opentelemetry.propagate", propagate)
    # The module is looked for once; have it looked for again.
    monkeypatch.setattr(tracecontext, "_propagate", tracecontext._UNSET)
    assert tracecontext.headers() == {"traceparent": TP, "baggage": "k=v"}
    # An explicit context wins.
    tp = new_traceparent()
    with trace_context(tp):
        assert tracecontext.headers() == {"traceparent": tp}


def test_sent_on_the_wire():
    got = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            got.append(self.headers.get("traceparent"))
            body = b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        fleet = SandboxFleet(f"http://127.0.0.1:{srv.server_address[1]}")
        fleet.status()
        with trace_context(TP):
            fleet.status()
        assert got == [None, TP]
    finally:
        srv.shutdown()
        srv.server_close()
