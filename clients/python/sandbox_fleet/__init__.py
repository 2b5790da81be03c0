"""sandbox_fleet: drive a fleet of Agent Sandboxes from a training loop.

Start a session with ``kubectl sandbox-fleet serve`` and connect to the
address it prints::

    from sandbox_fleet import SandboxFleet

    fleet = SandboxFleet("unix:///tmp/sandbox-fleet-run-.../serve.sock")
    fleet.add_tasks([{"id": "t1", "image": "busybox:1.36"}])
    fleet.lookahead(["t1"])
    with fleet.acquire("t1") as h:
        print(h.exec(["echo", "hi"]).stdout)

The names follow the Python package agent-sandbox-rl, so switching is an
import. ``sandbox_fleet.testing.FakeFleet`` offers the same interface with
no cluster, for trainers' unit tests.
"""

from .aio import AsyncHandle, AsyncProcess, AsyncSandboxFleet, AsyncShell
from .client import ExecResult, Handle, LookaheadWarmer, Process, SandboxFleet, Shell
from .errors import FleetError, InfraError, OutputTooLarge, SandboxLostError, SandboxStartError, TaskError
from .runner import RunReport, RunResult
from .tracecontext import new_traceparent, trace_context

__all__ = [
    "AsyncHandle", "AsyncProcess", "AsyncSandboxFleet", "AsyncShell", "ExecResult", "FleetError", "Handle", "InfraError",
    "LookaheadWarmer", "OutputTooLarge", "Process", "RunReport", "RunResult", "SandboxFleet", "Shell", "SandboxLostError", "SandboxStartError", "TaskError", "new_traceparent",
    "trace_context",
]
