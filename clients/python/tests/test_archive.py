"""What a sandbox sends back is read as untrusted (sandbox_fleet._archive):
plain tar only, no sparse member, within the caps, links last and checked
against the final tree. The same archives come from a replaced tar on the
real node in test_real_node.py."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

import hostile
from sandbox_fleet import UnsafeArchiveError
from sandbox_fleet._archive import files, untar_tree

CAP = 64 << 20


def _listing(d) -> list[str]:
    return sorted(os.path.relpath(os.path.join(p, n), d) for p, ds, fs in os.walk(d) for n in ds + fs)


@pytest.mark.parametrize("make", [hostile.gzip_bomb, hostile.sparse, hostile.link_chain, hostile.through_a_link])
def test_hostile_archives_are_refused(make, tmp_path):
    archive = make()
    assert len(archive) < 2 << 20
    dest = tmp_path / "dest"
    with pytest.raises(UnsafeArchiveError) as e:
        untar_tree(archive, "/tmp/out", str(dest), CAP)
    assert "download /tmp/out" in str(e.value)
    assert _listing(tmp_path) == ["dest"], "something was written"
    if make in (hostile.gzip_bomb, hostile.sparse):
        with pytest.raises(UnsafeArchiveError):
            files(archive, "ReadFiles", CAP)


def test_caps_hold_after_unpacking():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(3):
            info = tarfile.TarInfo(f"f{i}")
            info.size = 1000
            tar.addfile(info, io.BytesIO(bytes(1000)))
    assert len(files(buf.getvalue(), "ReadFiles", 3000)) == 3
    with pytest.raises(UnsafeArchiveError, match="more than 2999 bytes"):
        files(buf.getvalue(), "ReadFiles", 2999)


def test_links_inside_the_tree_are_kept(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, target in (("t/ln", "d/f"), ("t/d/up", "../d")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        info = tarfile.TarInfo("t/d/f")
        info.size, info.mode = 2, 0o755
        tar.addfile(info, io.BytesIO(b"hi"))
    written = untar_tree(buf.getvalue(), "/t", str(tmp_path / "out"), CAP)
    assert len(written) == 3
    assert (tmp_path / "out" / "ln").read_bytes() == b"hi"
    assert os.readlink(tmp_path / "out" / "d" / "up") == "../d"
    assert os.stat(tmp_path / "out" / "d" / "f").st_mode & 0o777 == 0o755


def test_a_link_left_by_an_earlier_download_is_not_written_through(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(str(tmp_path / "elsewhere"), dest / "x")
    (tmp_path / "elsewhere").mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("t/x/f")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"!"))
    with pytest.raises(UnsafeArchiveError, match="through a link"):
        untar_tree(buf.getvalue(), "/t", str(dest), CAP)
    assert os.listdir(tmp_path / "elsewhere") == []
