"""Exceptions of the sandbox_fleet client.

Every failure of a sandbox or of the cluster is an :class:`InfraError`;
trainers mask those out of the loss instead of scoring a zero reward.
:class:`TaskError` is the task's own failure (its command ran and failed).
Other errors (a bad request, an unknown task or handle) are
:class:`FleetError`.
"""

from __future__ import annotations


class FleetError(Exception):
    """A call to the fleet session failed.

    ``code`` is the Connect status code (``"invalid_argument"``,
    ``"not_found"``, ...); ``verdict`` is ``"infra"``, ``"task"`` or None for a
    bad request.
    """

    verdict: str | None = None

    def __init__(self, message: str, code: str = "unknown", reason: str | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason


class InfraError(FleetError):
    """The infrastructure failed: the sandbox could not start or was lost,
    a wait timed out, or the API server failed. ``reason`` says which."""

    verdict = "infra"


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


def from_connect(code: str, message: str, meta: dict[str, str]) -> FleetError:
    """Maps a Connect error and its metadata to the exception to raise."""
    verdict = meta.get("sandbox-fleet-verdict")
    reason = meta.get("sandbox-fleet-reason")
    if verdict == "infra":
        cls = {"start": SandboxStartError, "lost": SandboxLostError}.get(reason or "", InfraError)
        return cls(message, code, reason)
    if code in ("unavailable", "deadline_exceeded") and verdict is None:
        # The server could not be reached or answer in time.
        return InfraError(message, code, "api")
    return FleetError(message, code, reason)


class OutputTooLarge(FleetError):
    """A command wrote, or a read returned, more than the caller's cap
    (``max_output``, ``max_bytes``): the client stopped reading, and the
    command was stopped with the call. Read more with a larger cap, or as
    it comes (``exec_stream``, ``Shell.run_stream``, ``Handle.start``,
    ``read_tar_into``)."""

    def __init__(self, message: str):
        super().__init__(message, "resource_exhausted")
