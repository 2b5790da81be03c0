"""Child processes whose lives the kernel ties to the trainer's.

Linux ends a child whose parent-death signal is set when the *thread*
that started it ends, not the process: a child started from a call made
through ``asyncio.to_thread`` would be signalled when that call returns.
So every such child is started from one thread that lives as long as this
process, and the signal comes when the trainer's process ends, however it
ends (SIGKILL and OOM included)."""

from __future__ import annotations

import concurrent.futures
import ctypes
import signal
import sys
from typing import Callable, TypeVar

T = TypeVar("T")

_starter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-fleet-starter")


def start(fn: Callable[[], T]) -> T:
    """fn() (which starts a process), run on the thread that lives as long
    as this process."""
    return _starter.submit(fn).result()


def signal_on_parent_death(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A preexec_fn that has the kernel send sig to the child when the
    thread that started it (see start) ends; nothing outside Linux."""
    def preexec() -> None:
        if sys.platform.startswith("linux"):
            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    return preexec
