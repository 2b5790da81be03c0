"""Files into and out of a sandbox: the tar archives the client sends,
the shell snippets behind list, exists and remove, and the cap on what a
read keeps in memory."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from ._commands import ExecResult
from ._connect import b64
from .errors import FailedPreconditionError, OutputTooLarge

# The most of an archive a read keeps in memory unless its caller says
# otherwise (read_tar and what is built on it).
MAX_TAR = 1 << 30


class Writable(Protocol):
    """Where an archive is written as it comes: a binary file."""

    def write(self, data: bytes, /) -> Any: ...


def _tar_of(files: Mapping[str, bytes | str], mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode = len(raw), mode
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


# _LIST prints the names in "$1", each ended by NUL: a name may hold a
# newline, and not every image has find -print0.
_LIST = ('cd -- "$1" || exit 2; for f in * .[!.]* ..?*; do { [ -e "$f" ] || [ -L "$f" ]; } && printf "%s\\0" "$f"; done; exit 0')


def _listed(path: str, r: ExecResult) -> list[str]:
    if r.exit_code != 0:
        raise FailedPreconditionError(f"list {path}: not a directory, or not readable: {r.stderr.decode(errors='replace').strip()}")
    return sorted(n.decode(errors="surrogateescape") for n in r.stdout.split(b"\0") if n)


def _removed(path: str, r: ExecResult) -> None:
    if r.exit_code != 0:
        raise FailedPreconditionError(f"remove {path}: {r.stderr.decode(errors='replace').strip()}")


def _tar_tree(local_dir: str) -> bytes:
    if not os.path.isdir(local_dir):
        raise ValueError(f"upload: {local_dir!r} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(local_dir)):
            tar.add(os.path.join(local_dir, name), arcname=name)
    return buf.getvalue()


def _split_file(path: str) -> tuple[str, str]:
    directory, _, name = path.rpartition("/")
    if not path.startswith("/") or not name:
        raise ValueError(f"path {path!r}: give an absolute path to a file")
    return directory or "/", name


def _tar_messages(hid: str, client_id: str, directory: str, archive: bytes, chunk: int) -> Iterator[dict[str, Any]]:
    yield {"handle": hid, "clientId": client_id, "directory": directory, "tar": b64(archive[:chunk])}
    for i in range(chunk, len(archive), chunk):
        yield {"tar": b64(archive[i:i + chunk])}


def _file_of(files: dict[str, bytes], path: str) -> bytes:
    key = "/" + path.lstrip("/")
    if key not in files:
        raise FailedPreconditionError(f"ReadFiles: {path} is not a regular file")
    return files[key]


class _Capped:
    """A binary file that takes at most limit bytes, for a read's archive."""

    def __init__(self, out: Writable, limit: int, method: str):
        self.out, self.limit, self.method, self.size = out, limit, method, 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise OutputTooLarge(f"{self.method}: the archive is larger than {self.limit} bytes: pass a larger max_bytes, "
                                 "or write it to a file as it comes with read_tar_into")
        self.out.write(data)
        return len(data)
