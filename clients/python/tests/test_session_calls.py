"""Every call of serve's session API (api/fleet/v1/fleet.proto) has its
three Python homes, as docs/contributing.md's recipe lists them: the
client makes it, the fake session answers it, and the blocking and
asyncio clients both reach it. A call added to the proto and missed in
one of them fails here."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

import sandbox_fleet
from sandbox_fleet import testing

# The checkout's proto (the package under test is the installed wheel).
PROTO = Path(os.environ.get("SANDBOX_FLEET_SOURCE", Path(__file__).resolve().parents[1])).resolve().parents[1] / "api" / "fleet" / "v1" / "fleet.proto"


def _calls() -> list[str]:
    calls = re.findall(r"^\s*rpc\s+(\w+)\s*\(", PROTO.read_text(), re.M)
    assert len(calls) > 20, f"found only {calls} in {PROTO}"
    return calls


def _client_source() -> str:
    package = Path(inspect.getfile(sandbox_fleet)).parent
    return "\n".join(p.read_text() for p in sorted(package.glob("*.py")) if p.name != "testing.py")


def test_the_client_makes_every_call_twice():
    """Each call is made by the blocking client and by its asyncio twin:
    `self._t.unary("Name"` (or a stream of it) at least twice."""
    source = _client_source()
    for call in _calls():
        made = len(re.findall(r'["\']' + call + r'["\']', source))
        assert made >= 2, f"{call} of fleet.proto is made {made} times by sandbox_fleet: add it beside its asyncio twin"


def test_the_fake_answers_every_call():
    for call in _calls():
        assert callable(getattr(testing.FakeSession, "_" + call, None)), \
            f"{call} of fleet.proto has no handler _{call} on sandbox_fleet.testing.FakeSession"
