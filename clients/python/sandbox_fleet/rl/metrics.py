"""agent-sandbox-rl's ``serve_metrics``: Prometheus metrics of this
process's fleets at one address. Each session's serve exports its own
(``--metrics-addr`` on loopback: the session's acquires, commands,
releases, clients, held sandboxes and pools, and the engine's claims and
phases); serve_metrics serves them together, as the reference serves its
``asrl_*`` series from the default registry."""

from __future__ import annotations

import http.server
import re
import threading
import urllib.request
import weakref
from typing import Any

# The metrics addresses of the sessions this process's fleets have open.
_sessions: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_lock = threading.Lock()

# What serve logs once it serves its metrics.
_METRICS_LINE = re.compile(rb"metrics at (http://\S+/metrics)")


def register(owner: Any) -> None:
    """Counts owner's session (an object with ``metrics_url()``) among the
    ones serve_metrics serves, for as long as owner lives."""
    with _lock:
        _sessions[id(owner)] = owner


def scrape() -> bytes:
    """Every open session's metrics, one exposition: a metric's HELP and
    TYPE lines once."""
    with _lock:
        owners = list(_sessions.values())
    seen: set[bytes] = set()
    out: list[bytes] = []
    for owner in owners:
        url = owner.metrics_url()
        if not url:
            continue
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body: bytes = resp.read()
        except OSError:
            continue  # a session closing as it is scraped
        for line in body.splitlines():
            if line.startswith((b"# HELP ", b"# TYPE ")):
                if line in seen:
                    continue
                seen.add(line)
            out.append(line)
    return b"\n".join(out) + b"\n"


def metrics_url(log: bytes) -> str | None:
    """The metrics URL serve logged, if it did."""
    m = _METRICS_LINE.search(log)
    return m.group(1).decode() if m else None


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics is served here")
            return
        body = scrape()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


def serve_metrics(port: int = 9095, addr: str = "0.0.0.0") -> tuple[http.server.ThreadingHTTPServer, threading.Thread]:
    """Serves GET /metrics at addr:port — the metrics of every session this
    process's fleets have open — from a daemon thread, and returns the
    server and the thread; the caller owns their lifetime
    (``server.shutdown()``). The reference's default address, 0.0.0.0,
    reaches every interface: pass 127.0.0.1 to keep it on this machine."""
    server = http.server.ThreadingHTTPServer((addr, port), _Handler)
    thread = threading.Thread(target=server.serve_forever, name="sandbox-fleet-metrics", daemon=True)
    thread.start()
    return server, thread
