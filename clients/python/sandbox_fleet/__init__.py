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
import. ``sandbox_fleet.testing.FakeFleet`` (and ``AsyncFakeFleet``) is the
same client over a session served in process, with no cluster, for
trainers' unit tests.
"""

from ._commands import Command, ExecResult
from ._fleet import AsyncSandboxFleet, LookaheadWarmer, SandboxFleet
from ._handle import AsyncHandle, Handle
from ._process import AsyncProcess, Process
from ._shell import AsyncShell, Shell
from .errors import (FailedPreconditionError, FleetError, ForeignHandleError, InfraError, InvalidArgumentError, NotFoundError,
                     NotWarmingError, OutputTooLarge, PermissionDeniedError, SandboxLostError, SandboxStartError,
                     SessionClosedError, TaskError, UnsafeArchiveError)
from .results import Added, Counts, Held, Lease, Pool, PoolChange, PoolsReady, Status
from .runner import RunReport, RunResult
from .tracecontext import new_traceparent, trace_context

__all__ = [
    "Added", "Counts", "Held", "Lease", "Pool", "PoolChange", "PoolsReady", "Status",
    "AsyncHandle", "AsyncProcess", "AsyncSandboxFleet", "AsyncShell", "Command", "ExecResult", "FailedPreconditionError", "FleetError",
    "ForeignHandleError", "Handle", "InfraError", "InvalidArgumentError", "LookaheadWarmer", "NotFoundError", "NotWarmingError",
    "OutputTooLarge", "PermissionDeniedError", "Process", "RunReport", "RunResult", "SandboxFleet", "SandboxLostError",
    "SandboxStartError", "SessionClosedError", "Shell", "TaskError", "UnsafeArchiveError", "new_traceparent", "trace_context",
]
