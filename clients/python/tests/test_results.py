"""The typed results read from the session's JSON as protobuf writes it:
int64 counts as strings, zero values left out, Durations and Timestamps
as text."""

from datetime import datetime, timezone

from sandbox_fleet import Added, Lease, PoolsReady, Status


def test_status_from_the_wire():
    st = Status.of({
        "runId": "r1", "namespace": "ns", "tasks": 3,
        "pools": [{"image": "a:1", "name": "p-a", "tasks": 2, "desired": 2, "warm": True,
                   "lastWanted": "2026-12-06T05:22:56.575286123Z"}],
        "handles": [{"id": "c-1", "taskId": "t1", "image": "a:1", "clientId": "py-1", "resets": 2,
                     "leaseExpires": "2026-12-06T05:23:56Z"}],
        "counts": {"acquired": "5", "released": "4", "reused": "2"},
        "leaseTtl": "60s", "warmTtl": "0.500s"})
    assert (st.run_id, st.namespace, st.tasks, st.lease_ttl, st.warm_ttl) == ("r1", "ns", 3, 60.0, 0.5)
    pool = st.pools[0]
    assert (pool.image, pool.ready, pool.warm, pool.error) == ("a:1", 0, True, "")
    assert pool.last_wanted == datetime(2026, 12, 6, 5, 22, 56, 575286, tzinfo=timezone.utc)
    held = st.handles[0]
    assert (held.id, held.task_id, held.client_id, held.resets) == ("c-1", "t1", "py-1", 2)
    assert held.lease_expires == datetime(2026, 12, 6, 5, 23, 56, tzinfo=timezone.utc)
    assert (st.counts.acquired, st.counts.released, st.counts.expired, st.counts.reused) == (5, 4, 0, 2)


def test_empty_messages_are_zero_values():
    st = Status.of({})
    assert (st.tasks, st.pools, st.handles, st.counts.acquired, st.lease_ttl) == (0, [], [], 0, 0.0)
    assert not PoolsReady.of({}) and PoolsReady.of({"ready": True}).ready
    assert Added.of({"added": 2, "total": 2}).pools == []
    assert Lease.of({}) == Lease(handles=0, ttl=60.0)
