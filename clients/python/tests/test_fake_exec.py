"""Exec and files on FakeFleet (the real node's are in test_real_node.py)."""

import os

import pytest

from sandbox_fleet import TaskError
from sandbox_fleet.testing import FakeFleet


@pytest.fixture
def handle():
    f = FakeFleet()
    f.add_tasks([{"id": "t", "image": "busybox:1.36"}])
    h = f.acquire("t")
    yield h
    f.close()


def test_exec(handle):
    r = handle.exec(["sh", "-c", "printf out; printf err >&2; exit 3"])
    assert (r.exit_code, r.stdout, r.stderr) == (3, b"out", b"err")
    assert handle.exec(["cat"], stdin=b"\x00\xff").stdout == b"\x00\xff"
    with pytest.raises(TaskError) as e:
        handle.exec(["false"], check=True)
    assert e.value.exit_code == 1 and e.value.verdict == "task"
    assert handle.exec(["sh", "-c", "echo $X"], env={"X": "y"}).stdout == b"y\n"


def test_files_round_trip(handle):
    data = os.urandom(20 << 20)
    handle.write_file("/testbed/big.bin", data)
    assert handle.read_file("/testbed/big.bin") == data
    handle.write_files("/out", {"a.txt": "A", "d/b.txt": b"B"})
    assert handle.read_files(["/out"]) == {"/out/a.txt": b"A", "/out/d/b.txt": b"B"}
