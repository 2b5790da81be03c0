"""Calls made within trace_context join the caller's trace in serve's spans.
Run by the Go test TestPythonClientTraced (clients/python), which starts an
OTLP receiver, gives serve its endpoint and this test the traceparent, and
checks the spans serve exported."""

from __future__ import annotations

import os

import pytest

from conftest import needs_cluster

from sandbox_fleet import trace_context

TRACEPARENT = os.environ.get("SANDBOX_FLEET_TRACEPARENT")

pytestmark = [needs_cluster, pytest.mark.skipif(not TRACEPARENT, reason="run by go test ./clients/python -run Traced")]


def test_calls_join_the_callers_trace(server):
    fleet = server().client()
    # Outside the context: a trace of serve's own.
    fleet.add_tasks([{"id": "traced-1", "image": "registry.example/swe/traced:1"}])
    with trace_context(TRACEPARENT):
        with fleet.acquire("traced-1") as h:
            assert h.node
