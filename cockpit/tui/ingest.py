"""A run's live state, folded from its events.jsonl in bounded batches. No textual here.

The screen calls :meth:`RunFeed.poll` from a timer. Each call reads chunks
of at most ``chunk_bytes`` until its time budget (``budget_s``) is spent, so
a writer producing 10,000 events a second never stalls the UI for more than
one budget per tick; it folds the events into plain Python state and returns
which aspects changed, so each widget redraws at most once per tick however
many events arrived.

When the reader falls behind, background samples (the bulk of the file, only
there for charts) are decimated before they are parsed: one sample line in
``stride`` is decoded, found by a byte search without parsing the others.
Gates, steps, logs and run boundaries are always decoded. Samples are kept
for charts with a bounded memory: past ``MAX_POINTS`` a series is halved by
keeping the larger value of each pair, so a short peak survives (a mean
would hide it).

The line reader mirrors ``events.Tail`` (byte offset, a torn last line kept
pending until its newline arrives, bad lines counted and skipped) but hands
back raw lines, so the decision to decode comes before the cost of decoding.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import events as ev
from .. import runs
from ..schema import Event, JSONObject

CHUNK_BYTES = 16 * 1024
BUDGET_S = 0.02  # parsing time per tick: the UI keeps the rest
BEHIND_PER_STRIDE = 256 * 1024  # one more step of sample decimation per this much backlog
MAX_STRIDE = 64
MAX_POINTS = 2048
LOG_LINES = 500
_KEY_KINDS = frozenset({ev.RUN_START, ev.PHASE_START, ev.GATE, ev.RUN_END})


@dataclass
class TimedValues:
    """Time-stamped values, halved by pairwise max when they grow past ``limit``."""

    limit: int = MAX_POINTS
    t: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)

    def add(self, t: float, y: float) -> None:
        self.t.append(t)
        self.y.append(y)
        if len(self.y) > self.limit:
            self._halve()

    def _halve(self) -> None:
        n = len(self.y) - (len(self.y) % 2)
        ys, ts = self.y, self.t
        new_y = [ys[i] if ys[i] >= ys[i + 1] else ys[i + 1] for i in range(0, n, 2)]
        new_t = [ts[i] for i in range(0, n, 2)]
        if n < len(ys):
            new_y.append(ys[-1])
            new_t.append(ts[-1])
        self.t, self.y = new_t, new_y

    @property
    def peak(self) -> float | None:
        return max(self.y) if self.y else None


@dataclass
class PhaseMark:
    phase: str
    t: float


@dataclass
class RunFeed:
    """Everything a run screen shows, kept current by :meth:`poll`."""

    path: Path
    chunk_bytes: int = CHUNK_BYTES
    budget_s: float | None = BUDGET_S  # None: read everything available in one poll
    decimate: bool = True
    start: Event | None = None
    end: Event | None = None
    gates: dict[str, Event] = field(default_factory=dict)
    marks: list[PhaseMark] = field(default_factory=list)
    phase: str | None = None
    # memory series: key -> TimedValues; keys "gpu0", "gpu1" (NVML used), "alloc", "reserved", "rss"
    mem: dict[str, TimedValues] = field(default_factory=dict)
    capacity: dict[str, float] = field(default_factory=dict)  # gpu key -> total bytes
    loss: TimedValues = field(default_factory=TimedValues)
    # Series (train) runs: loss by update number, every validation point, the latest step event.
    step_loss: TimedValues = field(default_factory=TimedValues)
    evals: list[Event] = field(default_factory=list)
    last_step: Event | None = None
    inputs: dict[str, JSONObject] = field(default_factory=dict)  # phase -> its phase_start inputs
    log: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    log_total: int = 0  # log lines ever appended: the screen writes only the new ones
    events_read: int = 0  # events decoded and folded
    samples_skipped: int = 0  # sample lines passed over while catching up
    first_t: float | None = None
    last_t: float | None = None
    # The events a run's state is derived from (run_start, phase_start, gate, run_end), in file order,
    # and the last eval: enough for cockpit.runs.state and compare, without keeping every event.
    key_events: list[Event] = field(default_factory=list)
    last_eval: Event | None = None
    # Measured time per update (rank 0's step events): the ETA of a train run comes from these.
    step_seconds: float = 0.0
    steps_timed: int = 0
    timed_steps: dict[str, Event] = field(default_factory=dict)  # phase -> its last timed step
    gone: bool = False  # the file was read, then disappeared (the run folder was deleted)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self._offset = 0
        self._pending = b""
        self._bad = 0
        self._sample_n = 0
        self._size = -1  # the file's size at the last look

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def behind_bytes(self) -> int:
        """How much of the file is written but not read yet (back-pressure, in bytes)."""
        self._grown()
        return max(0, self._size - self._offset)

    @property
    def bad_lines(self) -> int:
        return self._bad

    @property
    def lines_read(self) -> int:
        return self.events_read + self.samples_skipped

    def _grown(self) -> bool:
        """Whether the file holds bytes not read yet (one stat: an idle run costs nothing more)."""
        try:
            size = os.stat(self.path).st_size
        except (FileNotFoundError, NotADirectoryError):
            if self._offset:
                self.gone = True
            return False
        self.gone = False
        self._size = size
        return size > self._offset

    def _read_lines(self, max_bytes: int | None) -> list[bytes] | None:
        """Complete new lines (possibly none); None when no new bytes at all."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read() if max_bytes is None else fh.read(max_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            return None
        if not chunk:
            return None
        self._offset += len(chunk)
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()  # b"" when the chunk ended with a newline
        return lines

    def poll(self) -> set[str]:
        """Read new events within the time budget; return the aspects that changed."""
        dirty: set[str] = set()
        if not self._grown():
            return dirty
        start = time.perf_counter()
        budget = self.budget_s
        while True:
            stride = 1
            if self.decimate:
                stride = min(MAX_STRIDE, 1 + max(0, self._size - self._offset) // BEHIND_PER_STRIDE)
            lines = self._read_lines(None if budget is None else self.chunk_bytes)
            if lines is None:
                return dirty
            for raw in lines:
                if stride > 1 and ev.kind_of_line(raw) == ev.SAMPLE:
                    self._sample_n += 1
                    if self._sample_n % stride:
                        self.samples_skipped += 1
                        continue
                event = self._decode(raw)
                if event is not None:
                    try:
                        self._apply(event, dirty)
                    except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError):
                        self._bad += 1  # a well-formed line with a payload of the wrong shape: skipped
                        continue
                    self.events_read += 1
            if budget is None or time.perf_counter() - start >= budget:
                return dirty

    def _decode(self, raw: bytes) -> Event | None:
        event = ev.decode(raw)  # the one reader of a line: blank, not JSON or not an event is None
        if event is None and raw.strip():
            self._bad += 1
        return event

    def catch_up(self, seconds: float) -> set[str]:
        """One longer poll (on attaching): a finished run's file is usually read whole."""
        budget = self.budget_s
        self.budget_s = seconds
        try:
            return self.poll()
        finally:
            self.budget_s = budget

    def drain(self) -> set[str]:
        """Read everything there is now, every sample decoded (tests, one-shot views)."""
        decimate, budget = self.decimate, self.budget_s
        self.decimate, self.budget_s = False, None
        try:
            return self.poll()
        finally:
            self.decimate, self.budget_s = decimate, budget

    # ---- folding

    def _apply(self, e: Event, dirty: set[str]) -> None:
        kind = e.get("kind")
        t = e.get("t")
        if isinstance(t, (int, float)):
            if self.first_t is None:
                self.first_t = t
            self.last_t = t
        if kind in _KEY_KINDS:
            self.key_events.append(e)
        if kind == ev.SAMPLE:
            self._sample(e, t)
            dirty.add("mem")
        elif kind == ev.STEP:
            step_phase = e.get("phase")
            if e.get("duration_s") and isinstance(step_phase, str):
                self.timed_steps[step_phase] = e
            loss = e.get("loss")
            if isinstance(loss, (int, float)) and isinstance(t, (int, float)):
                self.loss.add(t, float(loss))
                dirty.add("loss")
            if e.get("rank") in (None, 0):
                self.last_step = e
                secs = e.get("duration_s")
                if isinstance(secs, (int, float)) and secs >= 0:
                    self.step_seconds += float(secs)
                    self.steps_timed += 1
                step = e.get("step")
                if isinstance(loss, (int, float)) and isinstance(step, (int, float)):
                    self.step_loss.add(float(step), float(loss))
                dirty.add("steps")
        elif kind == ev.EVAL:
            self.last_eval = e
            if e.get("rank") in (None, 0):
                self.evals.append(e)
                self.log.append(f"{'eval':<7} {eval_words(e)}")
                self.log_total += 1
                dirty |= {"evals", "loss", "log"}
        elif kind == ev.LOG:
            level = str(e.get("level", "info"))
            self.log.append(f"{level:<7} {e.get('message', '')}")
            self.log_total += 1
            dirty.add("log")
        elif kind == ev.PHASE_START:
            phase = e.get("phase")
            self.phase = phase
            inputs = e.get("inputs")
            if phase and isinstance(inputs, dict):
                self.inputs[phase] = inputs
            if phase and isinstance(t, (int, float)):
                self.marks.append(PhaseMark(phase, t))
            dirty |= {"gates", "status", "mem"}
        elif kind == ev.GATE:
            phase = e.get("phase")
            if phase:
                self.gates[phase] = e
                self._gate_capacity(e)
            dirty |= {"gates", "status"}
        elif kind == ev.RUN_START:
            self.start = e
            for gpu in _items((e.get("stack") or {}).get("gpus")):
                if isinstance(gpu, dict) and gpu.get("total"):
                    self.capacity[f"gpu{gpu.get('index', 0)}"] = float(gpu["total"])
            dirty |= {"gates", "status"}
        elif kind == ev.RUN_END:
            self.end = e
            if (self.start or {}).get("run_kind") == "train" and e.get("rank") in (None, 0):
                status, reason = str(e.get("status", "?")), str(e.get("stop_reason", ""))
                self.log.append(f"{'end':<7} " + (reason if reason.startswith(status) else f"{status}: {reason}"))
                self.log_total += 1
                dirty.add("log")
            dirty |= {"gates", "status"}

    def _sample(self, e: Event, t: float | None) -> None:
        if not isinstance(t, (int, float)):
            return
        for gpu in e.get("nvml") or []:
            if not isinstance(gpu, dict) or gpu.get("used") is None:
                continue
            key = f"gpu{gpu.get('index', 0)}"
            self._series(key).add(t, float(gpu["used"]))
            if gpu.get("total"):
                self.capacity[key] = float(gpu["total"])
        torch = e.get("torch") or {}
        if torch.get("allocated") is not None:
            self._series("alloc").add(t, float(torch["allocated"]))
        if torch.get("reserved") is not None:
            self._series("reserved").add(t, float(torch["reserved"]))
        if e.get("rss") is not None:
            self._series("rss").add(t, float(e["rss"]))

    def _gate_capacity(self, g: Event) -> None:
        mem: Mapping[str, object] = g.get("mem") or {}
        for gpu in _items(mem.get("nvml")):
            if isinstance(gpu, dict) and gpu.get("total"):
                self.capacity[f"gpu{gpu.get('index', 0)}"] = float(gpu["total"])

    def _series(self, key: str) -> TimedValues:
        s = self.mem.get(key)
        if s is None:
            s = self.mem[key] = TimedValues()
        return s

    # ---- queries

    def state(self) -> runs.RunState:
        """The run's state by the one rule (``cockpit.runs.state``), from the events read so far."""
        evs = list(self.key_events)
        if self.last_t is not None and (not evs or evs[-1].get("t") != self.last_t):
            evs.append({"kind": "tail", "t": self.last_t})  # only its time counts (a crashed run's end)
        return safe_state(self.path.parent, evs)

    def events_for_compare(self) -> list[Event]:
        """The events compare needs of a run (its state's, the last step and eval), in file order."""
        extra = [e for e in (self.last_step, self.last_eval, *self.timed_steps.values()) if e is not None]
        seen: set[int] = set()
        out = []
        for e in [*self.key_events, *extra]:
            if id(e) not in seen:
                seen.add(id(e))
                out.append(e)
        return sorted(out, key=lambda e: e["t"] if isinstance(e.get("t"), (int, float)) else 0.0)

    @property
    def phases(self) -> list[str]:
        planned = (self.start or {}).get("phases")
        return list(planned) if planned else list(ev.PHASES)

    @property
    def kind(self) -> str:
        """The run_start's run kind: "pilot" (gated phases) or "train" (a series run)."""
        return str((self.start or {}).get("run_kind") or "pilot")

    @property
    def planned_updates(self) -> int | None:
        """A train run's budget as it started (None until the train phase says so)."""
        value = (self.inputs.get("train") or {}).get("updates")
        if value is None:
            value = ((self.start or {}).get("params") or {}).get("updates")
        return int(value) if isinstance(value, (int, float)) and value else None

    @property
    def has_gpu(self) -> bool:
        return any(k.startswith("gpu") for k in self.mem) or bool(self.capacity)

    def phase_peak(self, phase: str) -> tuple[float | None, str]:
        """A finished phase's peak memory in bytes and the counter it comes from."""
        return gate_peak(self.gates.get(phase), gpu=self.has_gpu)

    def phase_started(self, phase: str) -> float | None:
        for m in reversed(self.marks):
            if m.phase == phase:
                return m.t
        return None


UNREADABLE = "unreadable"


def _items(value: object) -> list[object]:
    """A JSON array's items, none for a missing one; a number in its place raises (the line is counted bad, as
    any payload of the wrong shape), a string or an object yields what iterating it yields (skipped as no GPU)."""
    if not value:
        return []
    if isinstance(value, (list, str, dict)):
        return list(value)
    raise TypeError(f"not an array: {value!r}")


def safe_state(rdir: Path, evs: list[Event]) -> runs.RunState:
    """``runs.state``, or an "unreadable" state saying why when the events are not what a run writes."""
    try:
        return runs.state(rdir, evs)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError) as exc:
        return runs.RunState(
            rdir.name,
            rdir,
            UNREADABLE,
            None,
            f"events.jsonl holds an event Cockpit cannot read ({type(exc).__name__}: {exc})",
            None,
            None,
            None,
            "",
        )


def eval_words(e: Event) -> str:
    """One validation point in words: update, val_loss and the task's metrics."""
    loss = e.get("loss")
    out = f"update {e.get('step', '?')}: val_loss " + (
        f"{loss:.4g}" if isinstance(loss, (int, float)) else "non-finite"
    )
    metrics = e.get("metrics")
    for k, v in (metrics if isinstance(metrics, dict) else {}).items():
        out += f" {k} " + (f"{v:.3g}" if isinstance(v, (int, float)) else "-")
    return out


def gate_peak(gate: Event | None, gpu: bool | None = None) -> tuple[float | None, str]:
    """Peak of one gate by the one rule (``cockpit.runs.mem_peak``): torch peak reserved, else peak RSS.

    In a run that has a GPU (``gpu=True``) a phase without GPU counters has no
    peak rather than its RSS: the bars compare GPU memory with GPU capacity.
    """
    if not gate:
        return None, ""
    value, counter = runs.mem_peak(gate.get("mem"))
    if value is None or (gpu and counter != runs.GPU_PEAK):
        return None, ""
    return float(value), counter
