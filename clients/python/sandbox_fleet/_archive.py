"""Reading the tar archives a sandbox sends back, as untrusted input.

ReadFiles streams what the sandbox's own ``tar`` writes, and code in a
sandbox (a model's actions) can replace its ``tar``. So an archive is read
as plain tar only (no gzip, bzip2 or xz, which would expand past the cap
the read was held to), with no sparse member (a hole expands the same
way), within a cap on each member and on all of them once unpacked; and a
tree is written with its links last, each checked against the final tree:
no link may lead out of the destination or pass through another link.
Anything else raises UnsafeArchiveError and writes nothing more."""

from __future__ import annotations

import io
import os
import posixpath
import tarfile

from .errors import UnsafeArchiveError


def _open(archive: bytes, what: str) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=io.BytesIO(archive), mode="r:")
    except tarfile.TarError as e:
        raise UnsafeArchiveError(f"{what}: what the sandbox sent is not a plain tar archive ({e}): compressed or "
                                 "corrupt, as from a tar that was replaced in the sandbox; nothing was read") from None


def _checked_members(tar: tarfile.TarFile, what: str, limit: int) -> list[tarfile.TarInfo]:
    """The members, once each is within the caps and none is sparse."""
    members = tar.getmembers()
    total = 0
    for m in members:
        if m.issparse():
            raise UnsafeArchiveError(f"{what}: member {m.name!r} is sparse: its holes would expand past what was "
                                     "sent; refused (nothing was written)")
        if m.isfile():
            total += m.size
            if m.size > limit or total > limit:
                raise UnsafeArchiveError(f"{what}: the files unpack to more than {limit} bytes (at {m.name!r}): "
                                         "pass a larger max_bytes to read more; nothing was written")
    return members


def files(archive: bytes, what: str, limit: int) -> dict[str, bytes]:
    """The regular files of archive by absolute path."""
    out = {}
    with _open(archive, what) as tar:
        for m in _checked_members(tar, what, limit):
            if m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                out["/" + m.name.lstrip("/")] = f.read()
    return out


def _inside(rel: str) -> bool:
    """Whether rel, a path relative to the destination, stays inside it."""
    norm = posixpath.normpath(rel)
    return not (posixpath.isabs(rel) or norm == ".." or norm.startswith("../"))


def untar_tree(archive: bytes, remote_dir: str, local_dir: str, limit: int) -> list[str]:
    """Unpacks the archive of remote_dir so that its contents land in
    local_dir; returns the paths written. Directories and files come
    first, links last."""
    prefix = remote_dir.strip("/")
    what = f"download {remote_dir}"
    root = os.path.realpath(local_dir)
    os.makedirs(root, exist_ok=True)
    with _open(archive, what) as tar:
        members = _checked_members(tar, what, limit)
        placed: list[tuple[tarfile.TarInfo, str]] = []
        links: dict[str, str] = {}  # where each link lands (relative) -> its target
        for m in members:
            name = m.name.strip("/")
            if name == prefix:
                continue
            rel = posixpath.normpath(name[len(prefix) + 1:] if prefix and name.startswith(prefix + "/") else name)
            if not _inside(rel) or rel == ".":
                raise UnsafeArchiveError(f"{what}: {m.name!r} would land outside {local_dir}; nothing more was written")
            if m.issym():
                if rel in links:
                    raise UnsafeArchiveError(f"{what}: link {m.name!r} comes twice in the archive; refused")
                links[rel] = m.linkname
            elif m.isdir() or m.isfile():
                placed.append((m, rel))
        # No member may sit below a link (it would be written through it).
        for m, rel in placed:
            if any(rel.startswith(link + "/") for link in links):
                raise UnsafeArchiveError(f"{what}: {m.name!r} lies below a link of the archive; refused")
        for link, target in links.items():
            _check_link(what, local_dir, link, target, links)
        # What local_dir held before may have links of its own: nothing is
        # written through one out of it.
        for rel in [rel for _, rel in placed] + list(links):
            real = os.path.realpath(os.path.join(root, os.path.dirname(rel)))
            if real != root and not real.startswith(root + os.sep):
                raise UnsafeArchiveError(f"{what}: {rel!r} would be written through a link in {local_dir} that leads "
                                         "out of it; nothing was written")
        written = []
        for m, rel in placed:
            target = os.path.join(root, rel)
            if m.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.islink(target):
                os.remove(target)
            src = tar.extractfile(m)
            assert src is not None
            with src, open(target, "wb") as dst:
                dst.write(src.read())
            os.chmod(target, m.mode & 0o777)
            written.append(target)
        for link, linkname in links.items():
            target = os.path.join(root, link)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.isdir(target) and not os.path.islink(target):
                raise UnsafeArchiveError(f"{what}: link {link!r} would replace a directory; refused")
            if os.path.lexists(target):
                os.remove(target)
            os.symlink(linkname, target)
            written.append(target)
    return written


def _check_link(what: str, local_dir: str, link: str, target: str, links: dict[str, str]) -> None:
    """A link may point only inside the destination, lexically, and not
    through another link of the archive (whose target the final tree, not
    the order of members, decides)."""
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
    if posixpath.isabs(target) or not _inside(resolved):
        raise UnsafeArchiveError(f"{what}: link {link!r} -> {target!r} points outside {local_dir}; refused")
    parts = resolved.split("/")
    for i in range(1, len(parts)):
        if "/".join(parts[:i]) in links:
            raise UnsafeArchiveError(f"{what}: link {link!r} -> {target!r} passes through the link "
                                     f"{'/'.join(parts[:i])!r}; refused")
    # Each step of the target as written: a '..' after a link climbs from
    # the link's target, not from the link, so none may follow one.
    walked = posixpath.dirname(link).split("/") if posixpath.dirname(link) else []
    for part in target.split("/"):
        if part in ("", "."):
            continue
        walked = walked[:-1] if part == ".." else walked + [part]
        if "/".join(walked) in links and "/".join(walked) != link:
            raise UnsafeArchiveError(f"{what}: link {link!r} -> {target!r} passes through the link "
                                     f"{'/'.join(walked)!r}; refused")
