"""sandbox_fleet: drive a fleet of Agent Sandboxes from a training loop.

Start a session of your own, ``kubectl sandbox-fleet serve`` as a child of
the trainer (``sandbox_fleet.start(config, namespace=...)``), or connect to
one started apart at the address it printed::

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
from ._fleet import AsyncSandboxFleet, LookaheadWarmer, SandboxFleet, start, start_async
from ._handle import AsyncHandle, Handle
from ._process import AsyncProcess, Process
from ._shell import AsyncShell, Shell
from .errors import (FailedPreconditionError, FleetError, ForeignHandleError, InfraError, InvalidArgumentError, NotFoundError,
                     NotWarmingError, OutputTooLarge, PermissionDeniedError, PluginError, SandboxLostError, SandboxStartError,
                     SessionClosedError, TaskError, UnsafeArchiveError)
from .results import Added, Counts, Held, Lease, Pool, PoolChange, PoolsReady, Status
from .runner import RunReport, RunResult
from .tracecontext import new_traceparent, trace_context

__all__ = [
    "Added", "Counts", "Held", "Lease", "Pool", "PoolChange", "PoolsReady", "Status",
    "AsyncHandle", "AsyncProcess", "AsyncSandboxFleet", "AsyncShell", "Command", "ExecResult", "FailedPreconditionError", "FleetError",
    "ForeignHandleError", "Handle", "InfraError", "InvalidArgumentError", "LookaheadWarmer", "NotFoundError", "NotWarmingError",
    "OutputTooLarge", "PermissionDeniedError", "PluginError", "Process", "RunReport", "RunResult", "SandboxFleet", "SandboxLostError",
    "SandboxStartError", "SessionClosedError", "Shell", "TaskError", "UnsafeArchiveError", "new_traceparent", "start", "start_async", "trace_context",
]
