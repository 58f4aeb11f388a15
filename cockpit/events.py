"""The event schema shared by the pilot process and its readers.

Pure Python on purpose: the TUI and the CLI import this module, and they must
never pay for (or depend on) torch. One event is one JSON object on one line of
``events.jsonl``; every object carries the schema version ``v``, a wall-clock
time ``t`` and a ``kind``. Writers flush after every line so that a reader
tailing the file sees events live; readers tolerate a torn last line (a writer
killed mid-line), which is simply not returned until it is complete.
"""

from __future__ import annotations

import enum
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .schema import *  # noqa: F403 - the schema's records are read and written as events' names
from .schema import JSON, SCHEMA_VERSION, Event, RunEndFields

EVENTS_FILE = "events.jsonl"

# Event kinds. A pilot writes run_start first and run_end last; everything
# between is phase_start/gate pairs, samples, steps, evals and log lines.
RUN_START = "run_start"
PHASE_START = "phase_start"
GATE = "gate"  # a phase's end: its checks, measurements and verdict
SAMPLE = "sample"  # background counters for live charts
STEP = "step"  # one optimizer update's metrics
EVAL = "eval"  # one validation point during a series run
LOG = "log"
RUN_END = "run_end"

KINDS = (RUN_START, PHASE_START, GATE, SAMPLE, STEP, EVAL, LOG, RUN_END)

# The pilot's phases, in the order it runs them. Readers use this to show the
# rows still to come; a run_start event carries the list actually planned.
PHASES = (
    "stack",  # software stack: torch, CUDA, driver, GPUs, extensions
    "data",  # identifiers, targets, lengths, masks; inspected examples
    "leakage",  # splits disjoint by the task's group unit
    "forward",  # shapes, finite loss, initial loss vs uniform
    "backward",  # finite gradient on every trainable parameter, none on frozen
    "update_first",  # first optimizer step: allocates optimizer state
    "update_second",  # a later step: optimizer state resident
    "accumulation",  # accumulated gradient == single-batch gradient
    "worst_case",  # a full update on the largest batch the campaign can produce
    "overfit",  # a fresh copy learns a tiny fixed subset
    "validation",  # eval mode, no grad, whole split, complete outputs
    "save",  # resume checkpoint: size, time
    "resume",  # new process: state restored, next losses identical
    "export",  # artifact exported, reloaded safely, control inputs replayed
)

# Payloads (all memory figures in bytes, times in seconds; None = not measured
# on this machine, never 0):
#   run_start   run_id, campaign, variant, seed, run_kind, pid, world, phases[list], params{},
#               stack{python, torch, cuda, driver, gpus[{index,name,total,capability}], ...}
#   phase_start phase, inputs{}
#   gate        phase, verdict, checks[{name, ok, detail, warn?, na?}], inputs{}, remedy,
#               message, duration_s, and the phase's own figures (schema.GateExtras),
#               mem{torch{allocated,reserved,peak_allocated,peak_reserved}|None,
#                   nvml[{index,name,used,total}]|None, rss, rss_peak,
#                   baseline{torch_allocated, nvml_used[], rss}}
#   sample      phase, rss, nvml[{index,used,total,util}]|None, torch{allocated,reserved}|None
#   step        step, loss, lr, grad_norm, examples, duration_s, phase
#   eval        step, loss, metrics{}
#   log         level, message
#   run_end     status, stop_reason, phase, message, exit_code, duration_s (schema.RunEndFields)
# Every event may carry ``rank`` (distributed runs) and ``device``.


class Verdict(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIPPED = "skipped"
    NA = "n/a"  # every check of the gate ran into a precondition that does not hold: measured nothing, passed nothing


class Status(str, enum.Enum):
    """What a run is, derived from its events (and whether its process lives)."""

    CREATED = "created"  # folder written, process not started yet
    RUNNING = "running"
    PASSED = "passed"  # pilot: every gate passed (warnings allowed)
    FAILED = "failed"  # a gate failed
    COMPLETED = "completed"  # series run: ended by its budget or a stop rule other than failure
    DIVERGED = "diverged"
    OOM = "oom"
    ERROR = "error"  # exception in user code or in Cockpit
    STOPPED = "stopped"  # SIGINT / SIGTERM / manual stop
    CRASHED = "crashed"  # process gone without a run_end event (SIGKILL, power, ...)


FINAL_STATUSES = frozenset(s for s in Status if s not in (Status.CREATED, Status.RUNNING))

# The one set of bad endings (status words, as run folders and notebook rows spell them). A crashed run was
# killed from outside: it ended badly, but nothing its settings decided made it end so, and it may go on from its
# last checkpoint; ENDED_BY_ITSELF leaves it out (the series guard refuses to repeat only those).
BAD_ENDINGS = frozenset(s.value for s in (Status.FAILED, Status.DIVERGED, Status.OOM, Status.ERROR, Status.CRASHED))
ENDED_BY_ITSELF = BAD_ENDINGS - {Status.CRASHED.value}


class ExitCode(enum.IntEnum):
    """Distinct exit codes per outcome, so scripts can branch on them."""

    OK = 0
    GATE_FAILED = 1
    USAGE = 2  # bad command line, notebook or task reference
    OOM = 3
    NONFINITE = 4  # non-finite loss or gradient, or divergence
    USER_ERROR = 5  # exception raised in the task's code
    INTERNAL = 6  # a bug in Cockpit itself
    STOPPED = 7  # SIGINT or SIGTERM
    RANK_FAILED = 8  # a distributed rank died or hung (collective timeout)
    CRASHED = 9  # the process was killed from outside: no final event
    DISK_FULL = 10  # no space left on the device the run writes to


# The one mapping from how a run ended to its status, exit code and words.
# ERROR covers two exit codes (the task's code raised, or Cockpit did): the
# final event carries which; a run without one (killed from outside) crashed.
STATUS_EXIT = {
    Status.PASSED: ExitCode.OK,
    Status.COMPLETED: ExitCode.OK,
    Status.FAILED: ExitCode.GATE_FAILED,
    Status.OOM: ExitCode.OOM,
    Status.DIVERGED: ExitCode.NONFINITE,
    Status.ERROR: ExitCode.USER_ERROR,
    Status.STOPPED: ExitCode.STOPPED,
    Status.CRASHED: ExitCode.CRASHED,
}

EXIT_MEANING = {
    ExitCode.OK: "every gate passed (pilot) or the run completed (training)",
    ExitCode.GATE_FAILED: "a gate failed",
    ExitCode.USAGE: "bad command line, notebook or task reference",
    ExitCode.OOM: "out of memory",
    ExitCode.NONFINITE: "non-finite loss or gradient, or divergence",
    ExitCode.USER_ERROR: "an exception in the task's code",
    ExitCode.INTERNAL: "a bug in Cockpit",
    ExitCode.STOPPED: "stopped by a signal (SIGTERM, SIGINT, cockpit stop)",
    ExitCode.RANK_FAILED: "a distributed rank died or hung",
    ExitCode.CRASHED: "the process was killed from outside (SIGKILL, out of host memory, power)",
    ExitCode.DISK_FULL: "the disk is full (status error, reason 'disk full: ...')",
}


@dataclass(frozen=True)
class Outcome:
    """How a run ended: status, exit code and the reason in words (run_end carries all three)."""

    status: Status
    code: ExitCode
    reason: str

    @classmethod
    def of(cls, status: Status, reason: str, code: ExitCode | None = None) -> Outcome:
        return cls(status, code if code is not None else STATUS_EXIT[status], reason)


def run_end_fields(outcome: Outcome, phase: str | None, message: str | None = None) -> RunEndFields:
    """The ``run_end`` fields for ``outcome``: its status, reason and exit code, the phase it ended in, and a
    message (the reason unless something else is said)."""
    return {
        "status": outcome.status.value,
        "stop_reason": outcome.reason,
        "phase": phase,
        "message": outcome.reason if message is None else message,
        "exit_code": int(outcome.code),
    }


def exit_code_of(status: str, run_end: Event | None = None) -> ExitCode:
    """The exit code of a run: its final event's, else the one its status implies."""
    code = (run_end or {}).get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool):
        try:
            return ExitCode(code)
        except ValueError:
            pass
    try:
        return STATUS_EXIT.get(Status(status), ExitCode.INTERNAL)
    except ValueError:
        return ExitCode.INTERNAL


def make(kind: str, **payload: Any) -> Event:
    """One event: its envelope and the writer's fields (each one a field of :class:`schema.Event`; tests hold every
    writer to it)."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    return cast(Event, {"v": SCHEMA_VERSION, "t": time.time(), "kind": kind, **payload})


class EventWriter:
    """Append-only writer, one ``write`` per event. Safe to share between threads.

    Each event is one ``os.write`` of a whole line on a file opened with
    ``O_APPEND`` (so ranks writing the same file never interleave inside a
    line), so a concurrent reader never sees half of an event except as a torn
    last line (which readers skip until it is complete). A write that failed
    (a full disk) may have left part of a line: the next event starts with a
    newline, so it is never glued to that fragment.
    """

    def __init__(self, path: Path | str, rank: int | None = None):
        import threading

        self.path = Path(path)
        self.rank = rank
        self._lock = threading.Lock()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        self._fd: int | None = os.open(self.path, flags, 0o644)
        self._torn = False

    def emit(self, kind: str, **payload: Any) -> Event:
        event = make(kind, **payload)
        if self.rank is not None and "rank" not in event:
            event["rank"] = self.rank
        line = json.dumps(event, separators=(",", ":"), allow_nan=False, default=_jsonable) + "\n"
        data = line.encode("utf-8")
        with self._lock:
            if self._fd is None:
                return event
            if self._torn:
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError:
                self._torn = True
                raise
            self._torn = False
        return event

    def sync(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):  # pragma: no cover - json handles floats itself
        return obj
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def finite_or_none(x: float | None) -> float | None:
    """JSON has no NaN or infinity: non-finite measurements are stored as None
    together with a text field saying what they were."""
    if x is None:
        return None
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        return None
    return x


def finite_figures(obj: Any) -> Any:
    """A gate's figures with every non-finite float replaced by None (JSON has none), through dicts and lists: a
    phase that measured an infinity (a loss that overflowed inside a check) keeps its gate, and the check's detail
    says what the value was."""
    if isinstance(obj, float):
        return finite_or_none(obj)
    if isinstance(obj, dict):
        return {k: finite_figures(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_figures(v) for v in obj]
    return obj


# A line longer than this is not an event Cockpit wrote (a gate with all its inputs is a few KiB):
# it is skipped whole, counted as bad, and never held in memory.
MAX_LINE = 1 << 20
CHUNK = 1 << 20


class LineSplitter:
    """Complete lines from a stream of byte chunks, each at most ``max_line`` bytes.

    A torn last line stays pending until its newline arrives; a line that
    grows past ``max_line`` is dropped as it streams (its bytes are never
    accumulated) and counted in ``too_long``.
    """

    def __init__(self, max_line: int = MAX_LINE):
        self.max_line = max_line
        self.pending = b""
        self.skipping = False
        self.too_long = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        lines = chunk.split(b"\n")
        last = lines.pop()  # the part after the last newline stays pending
        if lines:
            if self.skipping:
                self.skipping = False  # the end of an overlong line: dropped
                del lines[0]
            else:
                lines[0] = self.pending + lines[0]
                if len(lines[0]) > self.max_line:
                    self.too_long += 1
                    del lines[0]
            self.pending = b""
            if len(chunk) > self.max_line:  # only then can a line inside the chunk be too long
                kept = [ln for ln in lines if len(ln) <= self.max_line]
                self.too_long += len(lines) - len(kept)
                lines = kept
        if not self.skipping:
            self.pending += last
            if len(self.pending) > self.max_line:
                self.pending = b""
                self.skipping = True
                self.too_long += 1
        return lines

    @property
    def pending_bytes(self) -> int:
        return len(self.pending)


def open_events(path: Path | str) -> Any:
    """The events file opened for reading, or None when absent. Regular files only: a FIFO or a
    device planted in its place is refused (never blocks), and so is a symbolic link."""
    from .fsutil import NotAFile, open_regular

    try:
        return open_regular(path)
    except FileNotFoundError:
        return None
    except NotAFile:
        raise
    except IsADirectoryError as exc:  # pragma: no cover - open_regular says NotAFile first
        raise NotAFile(str(exc)) from None


# The fast path of every reader of events.jsonl: a line's kind read from its first bytes, without decoding it.
# make() puts "v", "t" and then "kind" first, so the event's own kind tag starts within KIND_AT bytes; a tag
# further in is inside a payload (a log message quoting an event) and says nothing about the line.
KIND_AT = 64
KIND_TAGS = {k: (f'"kind":"{k}"'.encode(), f'"kind": "{k}"'.encode()) for k in KINDS}  # compact (EventWriter), spaced
_KIND_KEY = b'"kind":'


def kind_of_line(raw: bytes) -> str | None:
    """The kind one line of events.jsonl names in its head, one of :data:`KINDS`; None when its head names none
    (not an event Cockpit wrote, or a torn line): decode it to know."""
    at = raw.find(_KIND_KEY, 0, KIND_AT + len(_KIND_KEY))
    if at < 0 or at >= KIND_AT:
        return None
    rest = raw[at + len(_KIND_KEY) : at + len(_KIND_KEY) + 16].lstrip(b" ")
    end = rest.find(b'"', 1)
    if not rest.startswith(b'"') or end < 0:
        return None
    kind = rest[1:end].decode("ascii", "replace")
    return kind if kind in KINDS else None


def decode(raw: bytes) -> Event | None:
    """One line as an event, or None when it is not one (blank, not JSON, not an object with a kind)."""
    if not raw.strip():
        return None
    try:
        event = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return cast(Event, event) if isinstance(event, dict) and "kind" in event else None


@dataclass
class Tail:
    """Incremental reader: each ``read_new()`` returns only complete new events.

    Keeps a byte offset, so re-reading a large file costs nothing; a torn last
    line stays pending until its newline arrives. Lines that are not valid
    JSON (a foreign write, a disk error) or longer than :data:`MAX_LINE` are
    counted and skipped, not fatal. Only a regular file is read (a FIFO in its
    place is refused, never waited on), ``max_bytes`` at most per call.
    """

    path: Path
    offset: int = 0
    bad_lines: int = 0
    refused: str = ""  # why the file is not read (not a regular file), else ""
    _split: LineSplitter = field(default_factory=LineSplitter, repr=False)

    def read_new(self, max_bytes: int | None = None) -> list[Event]:
        from .fsutil import NotAFile

        try:
            fh = open_events(self.path)
        except NotAFile as exc:
            self.refused = f"{self.path}: {exc.strerror}"
            return []
        except OSError:
            return []
        if fh is None:
            return []
        out: list[Event] = []
        with fh:
            fh.seek(self.offset)
            left = max_bytes
            while left is None or left > 0:
                chunk = fh.read(CHUNK if left is None else min(CHUNK, left))
                if not chunk:
                    break
                self.offset += len(chunk)
                if left is not None:
                    left -= len(chunk)
                too_long = self._split.too_long
                for raw in self._split.feed(chunk):
                    event = decode(raw)
                    if event is not None:
                        out.append(event)
                    elif raw.strip():
                        self.bad_lines += 1
                self.bad_lines += self._split.too_long - too_long
        return out


def read_events(path: Path | str) -> list[Event]:
    """All complete events of a file; a torn last line is ignored.

    This holds every event in memory: for a whole run (which may have
    millions of step and sample events) ask ``cockpit.runs.summary`` instead.
    """
    return Tail(Path(path)).read_new()


def iter_kind(events: Iterable[Event], kind: str) -> Iterator[Event]:
    return (e for e in events if e.get("kind") == kind)


def gates(events: Iterable[Event]) -> list[Event]:
    return [e for e in events if e.get("kind") == GATE]


NEVER_REACHED = "never reached: "  # how a probe's row for a phase the script never got to begins


def last_phase(events: Iterable[Event], rank: int | None = None) -> str | None:
    """The phase the run (or one rank of it) was in, started and not ended, or last finished (a row for a phase
    the run never reached, which a probe writes after its end, is not where it was)."""
    phase = None
    for e in events:
        if e.get("kind") in (PHASE_START, GATE) and (rank is None or (e.get("rank") or 0) == rank):
            if e.get("kind") == GATE and str(e.get("message") or "").startswith(NEVER_REACHED):
                continue
            phase = e.get("phase")
    return phase


def phase_inputs(events: Sequence[Event], phase: str | None) -> dict[str, JSON]:
    for e in reversed(events):
        if e.get("kind") in (PHASE_START, GATE) and e.get("phase") == phase:
            return dict(e.get("inputs") or {})
    return {}
