"""Commands run in a sandbox, as the client sends and reads them: the
command itself (shell text or an argv), its result, and its output as it
streams, kept within the caller's cap."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

from ._connect import unb64
from .errors import InfraError, OutputTooLarge

# The most of a command's stdout and stderr a call keeps in memory unless
# its caller says otherwise (exec, Shell.run): a sandbox printing without
# end must not take the trainer's memory.
MAX_OUTPUT = 64 << 20

# What a handle runs: shell text (``sh -c``) or an argv.
Command = Union[str, Sequence[str]]


def _seconds(t: float) -> str:
    return f"{t:.3f}s"


def _argv(command: Command) -> list[str]:
    """The argv of a command: a string is shell text, run by ``sh -c`` (as
    the reference client, E2B and most sandbox SDKs take a command); a list
    or tuple of strings is the argv itself."""
    if isinstance(command, str):
        return ["sh", "-c", command]
    if isinstance(command, (list, tuple)) and all(isinstance(a, str) for a in command):
        return list(command)
    raise TypeError(f"command {command!r}: give shell text (a str) or an argv (a list of str), "
                    f"not {type(command).__name__}")


def _shown(command: Command) -> str:
    """The command as an error message shows it."""
    return command if isinstance(command, str) else command[0]


@dataclass
class ExecResult:
    """What a command did. ``stdout`` and ``stderr`` are bytes, exactly as the
    command wrote them; ``text()`` decodes them. ``timed_out`` says it was
    stopped at its timeout, with what it started: its exit code is then 124,
    as ``timeout(1)`` gives, and the output is what it wrote until then."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def text(self, encoding: str = "utf-8") -> tuple[str, str]:
        return self.stdout.decode(encoding, "replace"), self.stderr.decode(encoding, "replace")


def _events_of(m: dict[str, Any]) -> list[tuple[str, bytes | int | bool]]:
    """The events one Exec-like stream message carries."""
    out: list[tuple[str, bytes | int | bool]] = []
    if "stdout" in m:
        out.append(("stdout", unb64(m["stdout"])))
    if "stderr" in m:
        out.append(("stderr", unb64(m["stderr"])))
    if "exitCode" in m:
        if m.get("timedOut"):
            out.append(("timed_out", True))
        out.append(("exit", int(m["exitCode"])))
    return out


def _output(messages: Iterable[dict[str, Any]]) -> Iterator[tuple[str, bytes | int | bool]]:
    for m in messages:
        yield from _events_of(m)


class _Output:
    """A command's output as it comes, up to limit bytes in all."""

    def __init__(self, limit: int):
        self.limit, self.size = limit, 0
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.code: int | None = None
        self.timed_out = False

    def add(self, kind: str, data: bytes | int | bool) -> None:
        if isinstance(data, bytes):
            self.size += len(data)
            if self.size > self.limit:
                raise OutputTooLarge(f"the command wrote more than {self.limit} bytes: it was stopped; pass a larger max_output, "
                                     "or read its output as it comes (exec_stream, Shell.run_stream, Handle.start)")
            (self.out if kind == "stdout" else self.err).append(data)
        elif kind == "timed_out":
            self.timed_out = True
        else:
            self.code = int(data)

    def result(self) -> ExecResult:
        if self.code is None:
            raise InfraError("the stream ended without an exit code", "unavailable", "exec")
        return ExecResult(self.code, b"".join(self.out), b"".join(self.err), self.timed_out)


def _collect(events: Iterator[tuple[str, bytes | int | bool]], limit: int = MAX_OUTPUT) -> ExecResult:
    """The result of a command's events; past limit bytes of output the
    stream is closed, which stops the command, and OutputTooLarge raised."""
    o = _Output(limit)
    try:
        for kind, data in events:
            o.add(kind, data)
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    return o.result()


def _failed(r: ExecResult) -> str:
    return "timed out" if r.timed_out else f"exited {r.exit_code}"


def _signal_name(sig: int | str) -> str:
    if isinstance(sig, int):
        import signal as _signal

        return _signal.Signals(sig).name
    return str(sig)


_Event = tuple[str, bytes | int | bool]


async def _acollect(events: AsyncGenerator[_Event, None], limit: int) -> ExecResult:
    """As ``_collect``, for an asyncio stream of events."""
    o = _Output(limit)
    try:
        async for kind, data in events:
            o.add(kind, data)
    finally:
        await events.aclose()
    return o.result()
