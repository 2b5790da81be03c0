"""A session the client starts itself: ``kubectl-sandbox_fleet serve`` as a
child of the trainer, on a unix socket in a private directory, closed with
the fleet and ended with the trainer's process however it ends (its
parent-death signal is SIGTERM, on which serve tears the session down; a
serve that dies too leaves a heartbeat that expires, for ``reap
--orphans`` and manifests/reaper)."""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

from . import _lifetime
from .errors import PluginError

PLUGIN = "kubectl-sandbox_fleet"
PLUGIN_ENV = "SANDBOX_FLEET_PLUGIN"
_INSTALL = ("install it with `kubectl krew install sandbox-fleet` (or a release's binary on PATH), "
            f"or name it with {PLUGIN_ENV}=/path/to/{PLUGIN}")


def find_plugin(plugin: str | None = None) -> str:
    """The plugin binary: ``plugin``, else $SANDBOX_FLEET_PLUGIN, else the
    one a platform wheel carries, else kubectl's own on PATH."""
    for given, where in ((plugin, "plugin="), (os.environ.get(PLUGIN_ENV), PLUGIN_ENV)):
        if given:
            path = shutil.which(given)
            if path is None:
                raise PluginError(f"{where} names {given!r}, which is not an executable file: {_INSTALL}")
            return path
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", PLUGIN)
    if os.access(bundled, os.X_OK):
        return bundled
    path = shutil.which(PLUGIN)
    if path is None:
        raise PluginError(f"{PLUGIN} is not on PATH, and this package carries none: {_INSTALL}")
    return path


def config_args(config: Mapping[str, Any] | str | None, directory: str) -> list[str]:
    """The serve flags of config: a fleet configuration (as
    examples/fleet.yaml has it, a mapping) written as JSON into directory,
    or the path of a configuration file."""
    if config is None:
        return []
    if isinstance(config, str):
        return ["-f", config]
    path = os.path.join(directory, "fleet.json")
    with open(path, "w") as f:
        json.dump({"apiVersion": "sandbox-fleet.io/v1alpha1", "kind": "FleetConfig", **config}, f)
    return ["-f", path]


class Serve:
    """A serve child: started, its address read, stopped."""

    def __init__(self, plugin: str, args: Sequence[str], config: Mapping[str, Any] | str | None, ready_timeout: float):
        self.dir = tempfile.mkdtemp(prefix="sandbox-fleet-serve-")
        self.log_path = os.path.join(self.dir, "serve.log")
        argv = [plugin, "serve", *config_args(config, self.dir), *args]
        self._log = open(self.log_path, "w+b")
        try:
            self.proc = _lifetime.start(lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log,
                preexec_fn=_lifetime.signal_on_parent_death(signal.SIGTERM)))
        except OSError as e:
            self._log.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise PluginError(f"{plugin} could not be started: {e}: {_INSTALL}") from None
        self._lock = threading.Lock()
        address = _line(self.proc.stdout, ready_timeout)
        if not address:
            self.wait(2)
            failure = self._failure(plugin, ready_timeout)
            self.stop(grace=5)
            raise PluginError(failure)
        self.address = address
        atexit.register(self.stop)

    def _failure(self, plugin: str, timeout: float) -> str:
        log = self.log_tail()
        if "unknown command" in log or "unknown flag" in log:
            return f"{plugin} is too old for this client (its serve refused what the client asks: {log.strip()}): {_INSTALL}"
        if self.proc.returncode is None:
            return f"{plugin} serve printed no address within {timeout:.0f}s; its log ends:\n{log}"
        return f"{plugin} serve exited {self.proc.returncode} before it served; its log ends:\n{log}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""

    def wait(self, timeout: float) -> int | None:
        """Its exit code once it ends within timeout; None while it runs."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 120.0) -> None:
        """Ends serve: SIGTERM, on which it tears the session down; SIGKILL
        after grace seconds. Its directory goes with it."""
        with self._lock:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                if self.wait(grace) is None:
                    self.proc.kill()
                    self.proc.wait()
            atexit.unregister(self.stop)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._log.close()
            shutil.rmtree(self.dir, ignore_errors=True)


def _line(stream: IO[bytes] | None, timeout: float) -> str:
    """The first line of stream within timeout ("" at its end or then)."""
    assert stream is not None
    deadline, buf = time.monotonic() + timeout, b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            return ""
        chunk = os.read(stream.fileno(), 4096)
        if not chunk:
            return ""
        buf += chunk
    return buf.split(b"\n", 1)[0].decode().strip()


def serve_args(namespace: str | None, kubeconfig: str | None, context: str | None, run_id: str | None,
               args: Iterable[str]) -> list[str]:
    out = []
    for flag, value in (("--namespace", namespace), ("--kubeconfig", kubeconfig), ("--context", context),
                        ("--run-id", run_id)):
        if value:
            out += [flag, value]
    return out + list(args)
