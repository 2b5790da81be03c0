"""Archives a sandbox whose tar was replaced can send back: each must be
refused within the caps, writing nothing outside the destination."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
import tempfile


class _Zeros(io.RawIOBase):
    def __init__(self, n: int):
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def gzip_bomb(size: int = 1 << 30) -> bytes:
    """A gzipped tar of about 1 MiB whose one file unpacks to size bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w") as tar:
            info = tarfile.TarInfo("tmp/out/big")
            info.size = size
            tar.addfile(info, io.BufferedReader(_Zeros(size)))
    return buf.getvalue()


def sparse(size: int = 1 << 30) -> bytes:
    """A plain tar of a few KiB whose one sparse member is size bytes of
    holes, as GNU tar --sparse writes it."""
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "tmp", "out"))
        with open(os.path.join(d, "tmp", "out", "holes"), "wb") as f:
            f.truncate(size)
        return subprocess.run(["tar", "--sparse", "-c", "-f", "-", "-C", d, "tmp/out/holes"],
                              check=True, capture_output=True).stdout


def link_chain() -> bytes:
    """a/b -> c/d/e, s -> a/b/../../../.., then a/b again -> ../../..: each
    link checked alone, as it comes, stays inside; the final tree has s
    pointing at /."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("tmp/out", "tmp/out/a", "tmp/out/c", "tmp/out/c/d", "tmp/out/c/d/e"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, target in (("tmp/out/a/b", "c/d/e"), ("tmp/out/s", "a/b/../../../.."), ("tmp/out/a/b", "../../..")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def through_a_link() -> bytes:
    """A link to a directory outside, then a file written below it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("tmp/out/up")
        info.type, info.linkname = tarfile.SYMTYPE, ".."
        tar.addfile(info)
        data = b"escaped\n"
        info = tarfile.TarInfo("tmp/out/up/escaped")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
