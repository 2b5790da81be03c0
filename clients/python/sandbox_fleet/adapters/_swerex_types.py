"""SWE-ReX's exceptions, and the responses its runtime returns, as its
source defines them (src/swerex/exceptions.py, src/swerex/runtime/abstract.py
at 5c995c3): stand-ins used when SWE-ReX is not installed, and the types a
type checker sees."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class SwerexException(Exception):
    """swerex.exceptions.SwerexException."""


class NonZeroExitCodeError(SwerexException, RuntimeError):
    pass


class BashIncorrectSyntaxError(SwerexException, RuntimeError):
    def __init__(self, message: str, *, extra_info: dict[str, Any] | None = None):
        super().__init__(message)
        self.extra_info = extra_info or {}


class CommandTimeoutError(SwerexException, RuntimeError, TimeoutError):
    pass


class SessionExistsError(SwerexException, ValueError):
    pass


class SessionDoesNotExistError(SwerexException, ValueError):
    pass


class DeploymentNotStartedError(SwerexException, RuntimeError):
    def __init__(self, message: str = "Deployment not started"):
        super().__init__(message)


@dataclass
class IsAliveResponse:
    is_alive: bool
    message: str = ""

    def __bool__(self) -> bool:
        return self.is_alive


@dataclass
class CreateBashSessionResponse:
    output: str = ""
    session_type: str = "bash"


@dataclass
class BashObservation:
    output: str = ""
    exit_code: int | None = None
    failure_reason: str = ""
    expect_string: str = ""
    session_type: str = "bash"


@dataclass
class CloseBashSessionResponse:
    session_type: str = "bash"


@dataclass
class CommandResponse:
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None


@dataclass
class ReadFileResponse:
    content: str = ""


@dataclass
class WriteFileResponse:
    pass


@dataclass
class UploadResponse:
    pass


@dataclass
class CloseResponse:
    pass
