"""What the adapters share: copying local files into a sandbox, as the
frameworks' Docker runtimes do (``docker cp``)."""

from __future__ import annotations

import os
import stat

from .._handle import Handle


def copy_in(handle: Handle, source: str, target: str) -> None:
    """Copies a local file, or a tree, to target in handle's sandbox, with
    its mode."""
    if os.path.isdir(source):
        handle.upload(source, target)
        return
    with open(source, "rb") as f:
        handle.write_file(target, f.read(), mode=stat.S_IMODE(os.stat(source).st_mode))
