"""The client's interface, on FakeFleet and through `serve` on kwok nodes."""

from __future__ import annotations

import pytest

from blocking import is_fake
from conftest import BIN
from sandbox_fleet import testing
from sandbox_fleet import FleetError, ForeignHandleError, NotFoundError, Pool, SandboxFleet
from sandbox_fleet.testing import FakeFleet

TASKS = [
    {"id": "a-1", "image": "registry.example/swe/a:1", "repo": "a"},
    {"id": "a-2", "image": "registry.example/swe/a:1"},
    {"id": "b-1", "image": "registry.example/swe/b:1"},
]


def test_add_lookahead_acquire_release(fleet):
    added = fleet.add_tasks(TASKS)
    assert added.added == 3 and added.total == 3
    assert {p.image for p in added.pools} == {"registry.example/swe/a:1", "registry.example/swe/b:1"}
    pools = fleet.lookahead(["a-1", "registry.example/swe/b:1"])
    assert [p.image for p in pools] == ["registry.example/swe/a:1", "registry.example/swe/b:1"], pools
    assert all(isinstance(p, Pool) and p.tasks >= 1 and p.desired >= 1 for p in pools), pools
    ready = fleet.wait_pools_ready(timeout=120)
    assert ready.ready and ready, ready
    assert {p.image for p in ready.pools} == {"registry.example/swe/a:1", "registry.example/swe/b:1"}
    for p in ready.pools:
        assert p.ready >= p.desired >= 1, p

    with fleet.acquire("a-1") as h:
        assert h.task_id == "a-1" and h.image == "registry.example/swe/a:1"
        assert h.pod and h.node and h.hostname
        status = fleet.status()
        assert [(x.id, x.task_id, x.client_id) for x in status.handles] == [(h.id, "a-1", fleet.client_id)]
        assert status.tasks == 3 and status.lease_ttl > 0 and status.run_id
    assert not fleet.status().handles

    h = fleet.acquire(image="registry.example/swe/b:1")
    assert h.image == "registry.example/swe/b:1"
    fleet.release(h)
    status = fleet.status()
    assert not status.handles and (status.counts.acquired, status.counts.released) == (2, 2), status
    assert fleet.renew().handles == 0


# Rows as trainers have them, and what `run --tasks` makes of the same rows
# (pkg/fleet/tasks' TestLoad): SWE-bench rows with and without docker_image,
# an R2E-Gym row, a row's JSON text, an image.
ROWS = [
    {"instance_id": "django__django-11099", "repo": "django/django", "FAIL_TO_PASS": '["test_x"]'},
    {"instance_id": "astropy__astropy-12907", "docker_image": "registry.example/swe/astropy:1"},
    {"repo_name": "orange3", "commit_hash": "0123456789abcdef", "docker_image": "registry.example/r2e/orange3:0123456789abcdef"},
    '{"id": 7, "image": "registry.example/swe/seven:1"}',
    "registry.example/swe/listed:1",
]
ROW_TASKS = {
    "django__django-11099": "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
    "astropy__astropy-12907": "registry.example/swe/astropy:1",
    "orange3-0123456789ab": "registry.example/r2e/orange3:0123456789abcdef",
    "7": "registry.example/swe/seven:1",
    "4": "registry.example/swe/listed:1",
}


def test_rows_as_trainers_have_them(fleet):
    assert fleet.add_tasks(ROWS).total == 5
    for tid, image in ROW_TASKS.items():
        assert [p.image for p in fleet.lookahead([tid])] == [image], tid
    fleet.add_tasks([{"task": "named", "img": "registry.example/swe/named:1", "image": "kept as metadata"}],
                    id_field="task", image_field="img")
    assert [p.image for p in fleet.lookahead(["named"])] == ["registry.example/swe/named:1"]
    fleet.add_tasks([{"id": "mirrored", "image": "busybox:1.36"}], rewrite=["docker.io=mirror.example/hub"])
    assert [p.image for p in fleet.lookahead(["mirrored"])] == ["mirror.example/hub/library/busybox:1.36"]


def test_bad_rows_add_nothing(fleet):
    with pytest.raises(FleetError) as e:
        fleet.add_tasks([{"id": "good", "image": "registry.example/swe/a:1"}, {"id": "x"}, "", {"id": "good", "image": "y:1"}])
    msg = str(e.value)
    assert e.value.code == "invalid_argument", e.value
    for want in ['rows[1]: task "x": no image', "rows[2]: an empty row", 'rows[3]: duplicate task id "good" (first at rows[0])']:
        assert want in msg, msg
    assert "rows[0]" not in msg.replace("first at rows[0]", "")
    with pytest.raises(FleetError) as e:
        fleet.add_tasks([{"task": "t", "image": "x:1"}], id_field="tsak")
    assert "no string or number field 'tsak' (id_field)" in str(e.value).replace('"', "'"), e.value
    with pytest.raises(FleetError) as e:
        fleet.add_tasks([{"id": "t", "image": "x:1"}], rewrite=["docker.io"])
    assert "rewrite[0]" in str(e.value) and "want FROM=TO" in str(e.value)
    # Nothing of the refused calls was added: "good" is free.
    assert fleet.add_tasks([{"id": "good", "image": "registry.example/swe/a:1"}]).total == 1


def test_wait_pools_ready_is_no_error_when_not_ready(fleet):
    fleet.add_tasks([{"id": "x", "image": "registry.example/swe/x:1"}])
    fleet.lookahead(["x"])
    out = fleet.wait_pools_ready(timeout=0.001)
    assert [p.image for p in out.pools] == ["registry.example/swe/x:1"], out
    pool = out.pools[0]
    # Ready or not, it says how far the pool got.
    assert pool.desired == 1
    assert out.ready == (pool.ready >= 1), out


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
    with pytest.raises(FleetError) as e:
        fleet.add_tasks([{"id": "no-image"}])
    assert e.value.code == "invalid_argument" and 'rows[0]: task "no-image": no image' in str(e.value)
    h = fleet.acquire("a-1")
    fleet.release(h)
    with pytest.raises(FleetError) as e:
        fleet.release(h)
    assert e.value.code == "not_found"


def test_foreign_handle(fleet):
    fleet.add_tasks(TASKS[:1])
    h = fleet.acquire("a-1")
    # Another client of the same session, and a client of another.
    if is_fake(fleet):
        other, elsewhere = FakeFleet(session=fleet.session), FakeFleet(isolate=True)
    else:
        other, elsewhere = SandboxFleet(fleet._t.address), None
    with pytest.raises(ForeignHandleError):
        other.release(h.id)
    with pytest.raises(ForeignHandleError):
        SandboxFleet(transport=other._t, client_id=fleet.client_id).renew()
    if elsewhere is not None:
        with pytest.raises(NotFoundError):
            elsewhere.release(h.id)
        elsewhere.close()
    assert [x.id for x in fleet.status().handles] == [h.id]
    fleet.release(h)


def test_closed_session(fleet):
    fleet.add_tasks(TASKS[:1])
    fleet.close()
    with pytest.raises(FleetError):
        fleet.add_tasks([{"id": "late", "image": "registry.example/swe/a:1"}])


def test_managed_run(fleet):
    """run() over 12 tasks of three images, 2 epochs: 2x12 results in task
    order, each with fn's value and verdict; a task whose sandbox cannot
    start is an infra result in its place (FakeFleet injects it; the real
    node's is in test_real_node.py); nothing is held afterwards."""
    images = ["registry.example/swe/a:1", "registry.example/swe/b:1", "registry.example/swe/c:1"]
    rows = [{"id": f"t{i:02d}", "image": images[i % 3], "n": i} for i in range(11)]
    rows.insert(5, {"id": "broken", "image": "registry.example/swe/broken:1"})
    fleet.add_tasks(rows)
    fake = is_fake(fleet)
    if fake:
        fleet.fail_start("broken", times=2)

    def rollout(task, h):
        assert h.task_id == task["id"] and h.image == task["image"]
        if task.get("n") == 7:
            raise ValueError("the agent gave up")
        return task.get("n", 0) * 10

    results = fleet.run(rollout, strategy="sliding", concurrency=4, epochs=2)
    assert len(results) == 2 and all(len(r) == 12 for r in results)
    for epoch, rs in enumerate(results):
        assert [r.task_id for r in rs] == [r["id"] for r in rows] and {r.epoch for r in rs} == {epoch}
        for r, row in zip(rs, rows):
            if row["id"] == "broken" and fake:
                assert (r.verdict, r.reason, r.value) == ("infra", "start", None), r
            elif row.get("n") == 7:
                assert r.verdict == "task" and isinstance(r.error, ValueError), r
            elif "n" in row:
                assert r.ok and r.value == row["n"] * 10 and r.node, r
    assert not fleet.status().handles
    report = fleet.report.to_dict()
    assert report["strategy"] == "sliding" and report["tasksOk"] == (20 if fake else 22), report
    assert report["claims"] == (22 if fake else 24) and report["tasksNotRun"] == (2 if fake else 0), report
    assert [p["name"] for p in report["phases"]][:2] == ["plan", "create_warmpool"], report
    assert "Run report (strategy sliding)" in fleet.report.summary()


def test_managed_run_refuses_what_it_cannot_do(fleet):
    with pytest.raises(FleetError) as e:
        fleet.run(lambda t, h: None)
    assert "add them" in str(e.value)
    fleet.add_tasks(TASKS[:1])
    if is_fake(fleet) and not BIN:
        # Without the plugin's planner FakeFleet plans one window whatever
        # the strategy, and says so: the strategies are the engine's.
        with pytest.warns(RuntimeWarning, match="whatever the strategy"):
            testing._warned_no_plugin = False
            fleet.run(lambda t, h: None, strategy="eager")
    else:
        with pytest.raises(ValueError, match="use one of none, naive, sliding, pipelined"):
            fleet.run(lambda t, h: None, strategy="eager")
    with pytest.raises(FleetError) as e:
        fleet.run(lambda t, h: None, recycle=True)
    assert "--recycle" in str(e.value)
    assert [r.verdict for r in fleet.run(lambda t, h: None, strategy="none")] == ["ok"]


def test_managed_run_async(fleet):
    """The asyncio twin over serve, with a coroutine and a plain fn (on the
    fake, the fake-async fleet runs every test body)."""
    import asyncio

    if is_fake(fleet):
        pytest.skip("the fake-async fleet runs test_managed_run's body")
    from sandbox_fleet import AsyncSandboxFleet

    fleet.add_tasks(TASKS)

    async def main():
        afleet = AsyncSandboxFleet(fleet._t.address)

        async def rollout(task, h):
            return (task["id"], h.task_id, task.get("repo"))

        got = await afleet.run(rollout, strategy="pipelined", concurrency=2)
        assert [r.value for r in got] == [("a-1", "a-1", "a"), ("a-2", "a-2", None), ("b-1", "b-1", None)]
        plain = await afleet.run(lambda task, h: h.task_id, strategy="naive", epochs=2)
        assert [[r.value for r in rs] for rs in plain] == [["a-1", "a-2", "b-1"]] * 2

    asyncio.run(main())
    assert not fleet.status().handles


def test_the_runner_does_what_the_plan_says():
    """A strategy is the engine's, defined once in Go: the runner warms and
    lets go what each window of the session's plan says, and names no
    strategy itself."""
    import ast
    import inspect

    from sandbox_fleet import runner

    named = {node.value for node in ast.walk(ast.parse(inspect.getsource(runner)))
             if isinstance(node, ast.Constant) and node.value in ("none", "naive", "sliding", "pipelined")}
    assert not named, f"runner.py branches on the strategies {sorted(named)}"
