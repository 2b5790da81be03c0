"""W3C Trace Context for the calls to a fleet session, so that serve's spans
of a rollout's calls join the trainer's trace.

Within ``with trace_context(traceparent):`` every call made by the thread or
asyncio task sends that ``traceparent`` (and ``tracestate``). Outside one,
when the ``opentelemetry`` package is installed, the calls send what its
current context gives; without it they send none. Serve's spans are
exported only when serve runs with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set.
"""

from __future__ import annotations

import re
import secrets
from typing import Any
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_current: ContextVar[tuple[str, str | None] | None] = ContextVar("sandbox_fleet_trace_context", default=None)

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def check_traceparent(traceparent: str) -> str:
    """Returns traceparent if it is a valid W3C traceparent, else raises
    ValueError saying what is wrong with it."""
    m = _TRACEPARENT.fullmatch(traceparent or "")
    why = None
    if not m:
        why = "it is not VERSION-TRACEID-PARENTID-FLAGS in lower-case hex (2, 32, 16 and 2 digits)"
    elif m.group(1) == "ff":
        why = "version ff is invalid"
    elif m.group(2) == "0" * 32:
        why = "the trace id is all zeros"
    elif m.group(3) == "0" * 16:
        why = "the parent id is all zeros"
    if why:
        raise ValueError(f"traceparent {traceparent!r}: {why}; e.g. {new_traceparent()!r} (sandbox_fleet.new_traceparent())")
    return traceparent


def new_traceparent(sampled: bool = True) -> str:
    """A traceparent starting a new trace, for a trainer with no tracer of
    its own: its trace id (the second field) finds serve's spans."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{'01' if sampled else '00'}"


@contextmanager
def trace_context(traceparent: str, tracestate: str | None = None) -> Iterator[str]:
    """Makes the calls within carry traceparent (and tracestate); yields
    traceparent."""
    token = _current.set((check_traceparent(traceparent), tracestate))
    try:
        yield traceparent
    finally:
        _current.reset(token)


def headers() -> dict[str, str]:
    """The trace headers of a call made now."""
    current = _current.get()
    if current is not None:
        traceparent, tracestate = current
        h = {"traceparent": traceparent}
        if tracestate:
            h["tracestate"] = tracestate
        return h
    propagate = _opentelemetry_propagate()
    if propagate is None:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate", "baggage")}


_UNSET = object()
_propagate: Any = _UNSET


def _opentelemetry_propagate() -> Any:
    """The opentelemetry package's propagate module, or None without it;
    looked for once, not on every call."""
    global _propagate
    if _propagate is _UNSET:
        try:
            from opentelemetry import propagate  # type: ignore[import]
        except ImportError:
            propagate = None
        _propagate = propagate
    return _propagate
