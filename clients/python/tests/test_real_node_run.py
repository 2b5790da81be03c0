"""The managed runner on the real node, in a module of its own: the
sandboxes test_real_node.py's module fixtures keep warm are gone by then,
and the one-node cluster has room for the run's."""

from __future__ import annotations

import os

import pytest

from conftest import needs_cluster

from sandbox_fleet import SandboxStartError

pytestmark = [needs_cluster, pytest.mark.skipif(not os.environ.get("SANDBOX_FLEET_REAL_NODE"), reason="needs the real node (run through go test ./e2e)")]

BUSYBOX = os.environ.get("SANDBOX_FLEET_BUSYBOX", "docker.io/library/busybox:1.36")


def test_managed_run(server):
    """run() on the real node: 12 tasks (one of an image that cannot be
    pulled) twice over, with exec in each; the unpullable task is an infra
    result in its place in both epochs, and nothing is held or left after."""
    c = server("--claim-grace", "10s").client()
    rows = [{"id": f"r{i:02d}", "image": BUSYBOX} for i in range(11)]
    rows.insert(4, {"id": "unpullable", "image": "docker.io/library/busybox:no-such-tag"})
    c.add_tasks(rows)

    def rollout(task, h):
        return h.exec(["sh", "-c", f"echo {task['id']}"], check=True).stdout.decode().strip()

    results = c.run(rollout, strategy="sliding", concurrency=4, epochs=2)
    assert [[r.task_id for r in rs] for rs in results] == [[r["id"] for r in rows]] * 2
    for rs in results:
        for r in rs:
            if r.task_id == "unpullable":
                assert r.verdict == "infra" and isinstance(r.error, SandboxStartError) and r.value is None, r
            else:
                assert r.ok and r.value == r.task_id, r
    assert not c.status().handles
    assert c.report.to_dict()["tasksNotRun"] == 2
