"""The pipe from the instrumented script to its run process: one JSON object per line. No torch.

The script writes (:class:`Channel`); the run process reads (:func:`messages`). Every message has a
``msg``: ``hello`` (the interpreter took the instrumentation), ``event`` (an event for events.jsonl,
as the run process relays it), ``stopping`` (the probe is ending the script), ``internal`` (the
instrumentation failed: nothing more can be measured) and ``exit`` (how the script ended, as far as
its interpreter knows).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Literal, TypeAlias, TypedDict, cast

from .. import events as ev

FD_ENV = "COCKPIT_PROBE_FD"  # the pipe's write end in the script
CONFIG_ENV = "COCKPIT_PROBE"  # what to watch, as JSON (ProbeConfig.child)
CLAIM_ENV = "COCKPIT_PROBE_CLAIMED"  # the pid of the process that took the instrumentation (its children skip)


class Hello(TypedDict):
    """``hello``: the interpreter that took the instrumentation."""

    msg: Literal["hello"]
    pid: int
    ppid: int
    python: str
    argv: list[str]
    mode: str


class EventMessage(TypedDict):
    """``event``: one event for events.jsonl (its ``kind`` and ``t`` set by the script), relayed as it is."""

    msg: Literal["event"]
    event: ev.Event


class Stopping(TypedDict):
    """``stopping``: the probe is ending the script, and why."""

    msg: Literal["stopping"]
    reason: str


class Internal(TypedDict):
    """``internal``: the instrumentation failed (a bug in Cockpit), with the end of its traceback."""

    msg: Literal["internal"]
    error: str
    traceback: str


class Raised(TypedDict):
    """The uncaught exception the script ended with."""

    type: str
    message: str
    frame: str  # the script's own innermost frame, 'file:line in function'
    remedy: str  # what to do ("" when not known), when cockpit.blame can tell (state the script kept across batches)
    oom: bool
    injected: bool  # raised by COCKPIT_INJECT (a test)


class Diverged(TypedDict):
    """The first non-finite loss: the phase and step it came in, its value in words ("nan")."""

    phase: str
    value: str
    step: int


class Save(TypedDict):
    """One checkpoint: the step it was taken after and the files written (absolute paths)."""

    step: int
    files: list[str]


class Exit(TypedDict):
    """``exit``: how the script ended, as far as its interpreter knows."""

    msg: Literal["exit"]
    how: str  # "ended", "stopped" (by the probe), "exception", "diverged"
    reason: str  # the probe's stop reason ("" when it did not stop the script)
    exception: Raised | None
    diverged: Diverged | None
    step: int  # optimizer steps counted
    phase: str | None  # the phase open at the end
    loaded: list[str]  # files it loaded (torch.load, safetensors)
    saves: list[Save]
    mem: ev.Mem | None  # a resumed process: its memory over its whole life
    seconds: float


# One line of the pipe, told apart by its ``msg``.
Message: TypeAlias = Hello | EventMessage | Stopping | Internal | Exit


class Channel:
    """Lines to the run process. A write blocks only while the pipe is full (the run process reads it at once)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._lock = threading.Lock()
        self.broken = False

    def send(self, msg: str, **payload: Any) -> None:
        payload["msg"] = msg
        try:
            line = json.dumps(payload, separators=(",", ":"), allow_nan=False, default=_plain)
        except ValueError:  # a NaN or infinity slipped into a payload: JSON has none
            line = json.dumps(_finite(payload), separators=(",", ":"), default=_plain)
        data = (line + "\n").encode()
        with self._lock:
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self.fd, view)
                except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
                    continue
                except OSError:
                    self.broken = True  # the run process is gone: nobody records this script any more
                    raise
                view = view[n:]


def _plain(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "__fspath__"):
        return os.fspath(obj)
    return str(obj)


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return ev.finite_or_none(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


class Reader:
    """Complete messages from the pipe's read end, bounded per line (events.LineSplitter)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._split = ev.LineSplitter()
        self.eof = False
        self.bad = 0

    def read(self) -> list[Message]:
        """What is there now (the fd is non-blocking); an empty list when nothing came."""
        out: list[Message] = []
        while not self.eof:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            for raw in self._split.feed(chunk):
                try:
                    m = json.loads(raw)
                except (ValueError, RecursionError):
                    self.bad += 1
                    continue
                if isinstance(m, dict) and isinstance(m.get("msg"), str):
                    out.append(cast(Message, m))  # the instrumentation's own line, as Channel.send wrote it
                else:
                    self.bad += 1
        return out
