"""docs/migrating.md's table of agent-sandbox-rl's public names is the
compatible module's: every name it gives sandbox_fleet.rl is there, and
sandbox_fleet.rl exports nothing the table does not list."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import sandbox_fleet.rl

# The checkout's docs (the package under test is the installed wheel).
DOC = Path(os.environ.get("SANDBOX_FLEET_SOURCE", Path(__file__).resolve().parents[1])).resolve().parents[1] / "docs" / "migrating.md"


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`")))
    return rows


def _resolve(path: str) -> object:
    module, _, name = path.rpartition(".")
    target = importlib.import_module(f"sandbox_fleet.rl.{module}") if module else sandbox_fleet.rl
    return getattr(target, name)


def test_the_table_is_the_compatible_modules_exports():
    rows = _rows()
    assert len(rows) > 60, f"the table in {DOC} was not found"
    given = {}
    for reference, ours in rows:
        if ours == "—":
            assert not hasattr(sandbox_fleet.rl, reference), f"{reference} is exported but the table says it is not"
            continue
        assert ours == reference, f"{reference}: the compatible module keeps the reference's name, not {ours}"
        given[reference] = _resolve(ours)
    exported = set(sandbox_fleet.rl.__all__)
    listed = {name for name in given if "." not in name}
    assert exported == listed, f"exported but not in the table: {sorted(exported - listed)}; in the table but not exported: {sorted(listed - exported)}"
    assert len({r for r, _ in rows}) == len(rows), "a name is listed twice"
    assert all(re.fullmatch(r"[\w.]+", r) for r, _ in rows)
