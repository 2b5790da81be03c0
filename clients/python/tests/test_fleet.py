"""The client's interface, on FakeFleet and through `serve` on kwok nodes."""

from __future__ import annotations

import pytest

from sandbox_fleet import FleetError, SandboxFleet
from sandbox_fleet.testing import FakeFleet

TASKS = [
    {"id": "a-1", "image": "registry.example/swe/a:1", "repo": "a"},
    {"id": "a-2", "image": "registry.example/swe/a:1"},
    {"id": "b-1", "image": "registry.example/swe/b:1"},
]


def test_add_lookahead_acquire_release(fleet):
    added = fleet.add_tasks(TASKS)
    assert added["added"] == 3 and added["total"] == 3
    fleet.lookahead(["a-1", "registry.example/swe/b:1"])
    ready = fleet.wait_pools_ready(timeout=120)
    assert ready["ready"], ready
    assert {p["image"] for p in ready["pools"]} == {"registry.example/swe/a:1", "registry.example/swe/b:1"}
    for p in ready["pools"]:
        assert p["ready"] >= p["desired"] >= 1, p

    with fleet.acquire("a-1") as h:
        assert h.task_id == "a-1" and h.image == "registry.example/swe/a:1"
        assert h.pod and h.node and h.hostname
        held = fleet.status()["handles"]
        assert [x["id"] for x in held] == [h.id]
    assert not fleet.status().get("handles")

    h = fleet.acquire(image="registry.example/swe/b:1")
    assert h.image == "registry.example/swe/b:1"
    fleet.release(h)
    assert not fleet.status().get("handles")


def test_wait_pools_ready_is_no_error_when_not_ready(fleet):
    fleet.add_tasks([{"id": "x", "image": "registry.example/swe/x:1"}])
    fleet.lookahead(["x"])
    out = fleet.wait_pools_ready(timeout=0.001)
    assert [p["image"] for p in out["pools"]] == ["registry.example/swe/x:1"], out
    pool = out["pools"][0]
    # Ready or not, it says how far the pool got (JSON leaves out a zero).
    assert int(pool["desired"]) == 1
    assert out["ready"] == (int(pool.get("ready", 0)) >= 1), out


def test_bad_input(fleet):
    fleet.add_tasks(TASKS[:1])
    with pytest.raises(FleetError) as e:
        fleet.acquire("no-such-task")
    assert e.value.code == "not_found" and "no-such-task" in str(e.value)
    with pytest.raises(FleetError) as e:
        fleet.add_tasks([{"id": "a-1", "image": "registry.example/swe/a:1"}])
    assert e.value.code == "invalid_argument" and "duplicate task id" in str(e.value)
    with pytest.raises(FleetError) as e:
        fleet.lookahead(["nope"])
    assert e.value.code == "not_found"
    with pytest.raises(ValueError):
        fleet.add_tasks([{"id": "no-image"}])
    h = fleet.acquire("a-1")
    fleet.release(h)
    with pytest.raises(FleetError) as e:
        fleet.release(h)
    assert e.value.code == "not_found"


def test_foreign_handle(fleet):
    fleet.add_tasks(TASKS[:1])
    h = fleet.acquire("a-1")
    if isinstance(fleet, FakeFleet):
        other = FakeFleet()
    else:
        other = SandboxFleet(fleet._t.address)
    with pytest.raises(FleetError) as e:
        other.release(h.id)
    assert e.value.code in ("permission_denied", "not_found")
    assert [x["id"] for x in fleet.status()["handles"]] == [h.id]
    fleet.release(h)


def test_closed_session(fleet):
    fleet.add_tasks(TASKS[:1])
    fleet.close()
    with pytest.raises(FleetError):
        fleet.add_tasks([{"id": "late", "image": "registry.example/swe/a:1"}])
