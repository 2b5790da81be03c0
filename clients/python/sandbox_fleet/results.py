"""What the session's calls return, as typed records: the pools of a plan,
what adding tasks changed, the session's status and a lease's renewal.
Each is read from the session's JSON message by ``of``; fields the session
leaves out (protobuf's JSON drops zero values) take their zero value, and
int64 counts (JSON strings) become ints."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


def _seconds(text: Any) -> float:
    """A protobuf Duration's JSON (``"60s"``, ``"0.500s"``) in seconds."""
    return float(str(text).rstrip("s")) if text else 0.0


def _time(text: Any) -> datetime | None:
    """A protobuf Timestamp's JSON (RFC 3339 in UTC, ``Z``, with up to
    nine digits of fraction), or None. Python 3.10's fromisoformat takes
    neither the ``Z`` nor more than six digits."""
    if not text:
        return None
    whole, _, fraction = str(text).rstrip("Z").partition(".")
    t = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc)
    return t.replace(microsecond=int(fraction[:6].ljust(6, "0"))) if fraction else t


@dataclass(frozen=True)
class Pool:
    """One image's warm pool: ``desired`` sandboxes wanted warm, ``ready``
    of them Ready; ``warm`` while something asked for it (lookahead,
    acquire or a run's window); ``error`` why it cannot fill, if it
    cannot; ``last_wanted`` when it was last asked for."""

    image: str
    name: str = ""
    cluster: str = ""
    tasks: int = 0
    desired: int = 0
    ready: int = 0
    warm: bool = False
    error: str = ""
    last_wanted: datetime | None = None

    @classmethod
    def of(cls, m: dict[str, Any]) -> "Pool":
        return cls(image=m.get("image", ""), name=m.get("name", ""), cluster=m.get("cluster", ""),
                   tasks=int(m.get("tasks", 0)), desired=int(m.get("desired", 0)), ready=int(m.get("ready", 0)),
                   warm=bool(m.get("warm")), error=m.get("error", ""), last_wanted=_time(m.get("lastWanted")))


def pools_of(ms: Any) -> list[Pool]:
    return [Pool.of(m) for m in ms or []]


@dataclass(frozen=True)
class PoolChange:
    """A pool whose planned depth changed as tasks were added: from
    ``before`` sandboxes to ``replicas``."""

    image: str
    pool: str = ""
    before: int = 0
    replicas: int = 0

    @classmethod
    def of(cls, m: dict[str, Any]) -> "PoolChange":
        return cls(image=m.get("image", ""), pool=m.get("pool", ""), before=int(m.get("before", 0)),
                   replicas=int(m.get("replicas", 0)))


@dataclass(frozen=True)
class Added:
    """What ``add_tasks`` did: ``added`` new tasks (rows seen before are
    skipped), ``total`` in the session now, and the pools it changed."""

    added: int
    total: int
    pools: list[PoolChange] = field(default_factory=list)

    @classmethod
    def of(cls, m: dict[str, Any]) -> "Added":
        return cls(int(m.get("added", 0)), int(m.get("total", 0)), [PoolChange.of(p) for p in m.get("pools") or []])


@dataclass(frozen=True)
class PoolsReady:
    """What ``wait_pools_ready`` saw at its end: whether every pool waited
    for is Ready, and each pool. ``bool()`` of it is ``ready``."""

    ready: bool
    pools: list[Pool] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.ready

    @classmethod
    def of(cls, m: dict[str, Any]) -> "PoolsReady":
        return cls(bool(m.get("ready")), pools_of(m.get("pools")))


@dataclass(frozen=True)
class Lease:
    """A renewal of a client's leases: how many sandboxes it holds, and
    how long the lease lasts unrenewed (seconds)."""

    handles: int
    ttl: float

    @classmethod
    def of(cls, m: dict[str, Any]) -> "Lease":
        return cls(int(m.get("handles", 0)), _seconds(m.get("leaseTtl", "60s")))


@dataclass(frozen=True)
class Counts:
    """The session's counts so far. ``expired``: handles released because
    their client's lease ran out; ``reused``: acquires served by a sandbox
    reset after an earlier lease; ``quarantined``: sandboxes released
    because their reset failed."""

    acquired: int = 0
    released: int = 0
    expired: int = 0
    failed: int = 0
    execs: int = 0
    reused: int = 0
    quarantined: int = 0

    @classmethod
    def of(cls, m: dict[str, Any]) -> "Counts":
        return cls(**{k: int(m.get(k, 0)) for k in ("acquired", "released", "expired", "failed", "execs", "reused",
                                                     "quarantined")})


@dataclass(frozen=True)
class Held:
    """A sandbox held in the session, by which client, until when."""

    id: str
    task_id: str = ""
    image: str = ""
    client_id: str = ""
    node: str = ""
    pod: str = ""
    resets: int = 0
    lease_expires: datetime | None = None

    @classmethod
    def of(cls, m: dict[str, Any]) -> "Held":
        return cls(id=m.get("id", ""), task_id=m.get("taskId", ""), image=m.get("image", ""),
                   client_id=m.get("clientId", ""), node=m.get("node", ""), pod=m.get("pod", ""),
                   resets=int(m.get("resets", 0)), lease_expires=_time(m.get("leaseExpires")))


@dataclass(frozen=True)
class Status:
    """The session: its run id and namespace, how many tasks it holds, its
    pools, the sandboxes held, its counts, and its lease and warm TTLs
    (seconds)."""

    run_id: str
    namespace: str
    tasks: int
    pools: list[Pool]
    handles: list[Held]
    counts: Counts
    lease_ttl: float
    warm_ttl: float

    @classmethod
    def of(cls, m: dict[str, Any]) -> "Status":
        return cls(m.get("runId", ""), m.get("namespace", ""), int(m.get("tasks", 0)), pools_of(m.get("pools")),
                   [Held.of(h) for h in m.get("handles") or []], Counts.of(m.get("counts") or {}),
                   _seconds(m.get("leaseTtl")), _seconds(m.get("warmTtl")))
