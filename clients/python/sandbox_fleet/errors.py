"""Exceptions of the sandbox_fleet client.

Every failure of a sandbox or of the cluster is an :class:`InfraError`;
trainers mask those out of the loss instead of scoring a zero reward.
:class:`TaskError` is the task's own failure (its command ran and failed).
The other errors are the caller's to fix, one class for each case a caller
tells apart::

    FleetError
    ├── InvalidArgumentError       a bad request (a field, a path, a name)
    ├── NotFoundError              no such task, image, handle, shell or process
    ├── PermissionDeniedError      the session refused the caller
    │   └── ForeignHandleError     another client's: its sandbox, its id, the session
    ├── FailedPreconditionError    the call cannot be made now
    │   ├── SessionClosedError     the session is closed
    │   └── NotWarmingError        a wait for pools nothing asked to warm
    ├── OutputTooLarge             past the caller's cap on output or archive
    ├── UnsafeArchiveError         an archive from a sandbox was refused
    ├── PluginError                the kubectl plugin is missing, or its serve did not start
    ├── InfraError                 the sandbox or the cluster failed
    │   ├── SandboxStartError
    │   └── SandboxLostError
    └── TaskError                  the task's command ran and failed
"""

from __future__ import annotations


class FleetError(Exception):
    """A call to the fleet session failed.

    ``code`` is the Connect status code (``"invalid_argument"``,
    ``"not_found"``, ...); ``verdict`` is ``"infra"``, ``"task"`` or None for a
    bad request; ``reason`` says more where the session gave one.
    """

    verdict: str | None = None
    code_default = "unknown"

    def __init__(self, message: str, code: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.code = code or self.code_default
        self.reason = reason


class InvalidArgumentError(FleetError, ValueError):
    """The request was wrong: the message says which field and why. It is a
    ValueError too, as Python's own refusals of a bad argument are."""

    code_default = "invalid_argument"


class NotFoundError(FleetError):
    """What the call named does not exist in the session: a task, an image,
    a handle (released, expired, never acquired), a shell or a process."""

    code_default = "not_found"


class PermissionDeniedError(FleetError):
    """The session refused the caller (its token, or its ServiceAccount)."""

    code_default = "permission_denied"


class ForeignHandleError(PermissionDeniedError):
    """What the call names is another client's: a sandbox it holds, a
    client id bound to its key while it holds a lease or a sandbox, or
    the session only its owner may close."""


class FailedPreconditionError(FleetError):
    """The call cannot be made in the session's present state."""

    code_default = "failed_precondition"


class SessionClosedError(FailedPreconditionError):
    """The session is closed: nothing more can be done in it."""


class NotWarmingError(FailedPreconditionError):
    """A wait for pools that nothing asked to warm, which would never end:
    ask for them with ``lookahead`` (or an acquire) first."""


class InfraError(FleetError):
    """The infrastructure failed: the sandbox could not start or was lost,
    a wait timed out, the API server failed, or the connection to the
    session broke. ``reason`` says which."""

    verdict = "infra"
    code_default = "unavailable"


class SandboxStartError(InfraError):
    """The sandbox could not start (a bad image, a pull that failed, no room)."""


class SandboxLostError(InfraError):
    """The sandbox's Pod went away while it was held."""


class TaskError(FleetError):
    """The task itself failed: its command ran and exited non-zero."""

    verdict = "task"

    def __init__(self, message: str, exit_code: int, stdout: bytes = b"", stderr: bytes = b""):
        super().__init__(message, code="task", reason="exit")
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr


class OutputTooLarge(FleetError):
    """A command wrote, or a read returned, more than the caller's cap
    (``max_output``, ``max_bytes``): the client stopped reading, and the
    command was stopped with the call. Read more with a larger cap, or as
    it comes (``exec_stream``, ``Shell.run_stream``, ``Handle.start``,
    ``read_tar_into``)."""

    code_default = "resource_exhausted"

    def __init__(self, message: str):
        super().__init__(message)


class UnsafeArchiveError(FleetError):
    """An archive read from a sandbox was refused: code in a sandbox can
    replace its ``tar``, so what comes back is read as untrusted — plain
    tar only, no sparse members, within a size cap once unpacked, and no
    link that leads out of the destination. Nothing of it was written."""

    code_default = "invalid_argument"


class PluginError(FleetError):
    """A session the client starts itself could not be started: the kubectl
    plugin (``kubectl-sandbox_fleet``) is not installed, is too old, or its
    ``serve`` failed (the message has the end of its log)."""

    code_default = "failed_precondition"


# The class of each Connect code a caller tells apart, and of the reasons
# the session sends with some of them (api/fleet/v1/headers.go).
_BY_CODE: dict[str, type[FleetError]] = {
    "invalid_argument": InvalidArgumentError,
    "not_found": NotFoundError,
    "permission_denied": PermissionDeniedError,
    "failed_precondition": FailedPreconditionError,
}
_BY_REASON: dict[tuple[str, str], type[FleetError]] = {
    ("permission_denied", "foreign"): ForeignHandleError,
    ("failed_precondition", "closed"): SessionClosedError,
    ("failed_precondition", "not_warming"): NotWarmingError,
}


def from_connect(code: str, message: str, meta: dict[str, str]) -> FleetError:
    """Maps a Connect error and its metadata to the exception to raise."""
    verdict = meta.get("sandbox-fleet-verdict")
    reason = meta.get("sandbox-fleet-reason")
    if verdict == "infra":
        infra = {"start": SandboxStartError, "lost": SandboxLostError}.get(reason or "", InfraError)
        return infra(message, code, reason)
    if code in ("unavailable", "deadline_exceeded") and verdict is None:
        # The server could not be reached or answer in time.
        return InfraError(message, code, "api")
    cls = _BY_REASON.get((code, reason or "")) or _BY_CODE.get(code) or FleetError
    return cls(message, code, reason)
