"""How FakeFleet's sandboxes run their commands: in a mount namespace of
their own (bubblewrap), whose root is the fake sandbox's directory, with
this machine's programs and libraries mounted read-only beside it and the
environment cleared to an image's. So ``cd /testbed``, ``/tmp/patch.diff``
and ``BASH_ENV=/root/.bashrc`` mean the sandbox's, not this machine's, and
nothing of the trainer's environment reaches a command."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence

from . import _lifetime

# The environment a container of an image without ENV lines starts with.
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# This machine's directories a command needs to run programs: mounted
# read-only (or, where this machine has them as links, as the same links).
_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")

# The directories an image's root has that a command expects to write;
# /usr/local is the sandbox's own, over this machine's /usr, as tools an
# agent framework installs go there (R2E-Gym's in /usr/local/bin).
_SKELETON = {"tmp": 0o1777, "root": 0o700, "var/tmp": 0o1777, "home": 0o755, "usr/local/bin": 0o755,
             "usr/local/sbin": 0o755, "usr/local/lib": 0o755}


class Isolation:
    """Whether and how commands are fenced. ``mode`` is ``"auto"`` (a
    mount namespace where bubblewrap can make one, else this machine with
    one loud warning), ``True`` (a mount namespace, or an error saying
    why not) or ``False`` (this machine, in the sandbox's directory)."""

    _probe_lock = threading.Lock()
    _probed: str | None = None  # None: not probed; "": works; else why not
    _warned = False

    def __init__(self, mode: bool | str = "auto"):
        if mode not in (True, False, "auto"):
            raise ValueError(f"isolate={mode!r}: give True, False or 'auto'")
        self.mode = mode

    @classmethod
    def _why_not(cls) -> str:
        """Why bubblewrap cannot fence a command here ("" when it can)."""
        with cls._probe_lock:
            if cls._probed is None:
                cls._probed = _probe()
            return cls._probed

    def fenced(self) -> bool:
        """Whether commands run in a namespace of their own."""
        if self.mode is False:
            return False
        why = self._why_not()
        if not why:
            return True
        if self.mode is True:
            raise RuntimeError(f"FakeFleet(isolate=True): {why}")
        if not Isolation._warned:
            Isolation._warned = True
            warnings.warn(f"FakeFleet runs sandbox commands on THIS machine: {why}. Absolute paths in commands "
                          "(cd /testbed, /tmp/...) reach this machine's files; install bubblewrap (Debian: "
                          "apt-get install bubblewrap) to fence them, or pass isolate=False to say you know.",
                          RuntimeWarning, stacklevel=4)
        return False


def _probe() -> str:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    root = tempfile.mkdtemp(prefix="sandbox-fleet-probe-")
    try:
        prepare(root)
        p = subprocess.run(wrap(root, ["true"], "/", {}), capture_output=True, timeout=30)
        if p.returncode != 0:
            return f"bwrap could not make a mount namespace: {p.stderr.decode(errors='replace').strip()}"
        return ""
    except (OSError, subprocess.SubprocessError) as e:
        return f"bwrap could not run: {e}"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def prepare(root: str) -> None:
    """Makes root look like an image's root to a command: the directories
    it expects to write, made if the image had none, and the links this
    machine has in place of a system directory (/bin -> usr/bin), which
    bwrap will not make over an existing one."""
    for name in _SYSTEM:
        host, here = "/" + name, os.path.join(root, name)
        if os.path.islink(host) and not os.path.lexists(here):
            os.symlink(os.readlink(host), here)
    for rel, mode in _SKELETON.items():
        path = os.path.join(root, rel)
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            os.chmod(path, mode)


def environment(hostname: str, env: Mapping[str, str] | None) -> dict[str, str]:
    """A command's whole environment: an image's, then the caller's."""
    return {"PATH": IMAGE_PATH, "HOME": "/root", "HOSTNAME": hostname, **(env or {})}


def wrap(root: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], hostname: str = "sandbox") -> list[str]:
    """The bwrap command line that runs argv with root as /, in cwd (a
    path in the sandbox), with env as its whole environment and hostname
    as its host name (a UTS namespace of its own, as a Pod has)."""
    out = [shutil.which("bwrap") or "bwrap", "--bind", root, "/"]
    for name in _SYSTEM:
        host = "/" + name
        if os.path.isdir(host) and not os.path.islink(host):
            out += ["--ro-bind", host, host]
    out += ["--bind", os.path.join(root, "usr", "local"), "/usr/local"]
    # --die-with-parent follows the thread that started bwrap: start it
    # with spawn(), whose thread lives as long as this process.
    out += ["--proc", "/proc", "--dev", "/dev", "--unshare-uts", "--hostname", hostname, "--die-with-parent", "--clearenv"]
    for k, v in env.items():
        out += ["--setenv", k, v]
    out += ["--chdir", cwd, "--", *argv]
    return out


def spawn(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Starts argv (a wrap()ped command) with pipes to its stdin, stdout
    and stderr, in a process group of its own. --die-with-parent follows
    the thread that started bwrap, so it starts from the thread that lives
    as long as this process (_lifetime): the sandboxes' processes end with
    the trainer's process, however it ends, and not before."""
    return _lifetime.start(lambda: subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, cwd=cwd, env=dict(env), start_new_session=True))


def local(root: str, path: str) -> str:
    """Where path in the sandbox is on this machine."""
    return os.path.join(root, path.lstrip("/"))
