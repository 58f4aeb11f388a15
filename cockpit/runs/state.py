"""What a run folder says: its status, its peak, its record. No torch.

A run's status is derived from its events: the final event says how it
ended; without one, a live process means running and a dead one crashed
(with the last phase it reached). The status of a distributed run is its
worst rank's.

**The peak**, one rule everywhere: on a GPU, torch's *peak reserved* (what
the caching allocator held, the figure a GPU is sized from, before the CUDA
context); without a GPU, the process's *peak RSS*. The counter is always
named next to the value. The campaign table, the run screen, the sheet,
compare, the plan and the report all ask :func:`mem_peak` / :func:`peak_of`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import events as ev
from ..contract import Params
from .brief import Summary
from .brief import summary as run_summary
from .files import RUN_FILE, RunToml, read_metrics, read_run_toml, run_dirs
from .process import is_alive, process_info, remote_info

# The pilot's phases that run only Cockpit's own checks: the data gate builds a second model to measure which output
# each target is scored against, and the overfit gate trains a fresh model beside the piloted one. The long run does
# neither, so their memory is shown per phase and never sizes it (a run's peak, the sheet, compare).
CHECK_PHASES = frozenset({"data", "leakage", "overfit"})
GPU_PEAK = "torch peak reserved"
HOST_PEAK = "process peak RSS"
MIB = 2**20


def mem_peak(mem: Mapping[str, Any] | None) -> tuple[int | None, str]:
    """The peak of one measurement (a gate's ``mem``, a run_end's ``mem``, metrics.json's ``peak``)."""
    mem = mem if isinstance(mem, dict) else {}
    t = mem.get("torch") if isinstance(mem.get("torch"), dict) else None
    reserved = _bytes(t.get("peak_reserved") if t else mem.get("peak_reserved"))
    if reserved is not None:
        return reserved, GPU_PEAK
    rss = _bytes(mem.get("rss_peak")) if mem.get("rss_peak") is not None else _bytes(mem.get("rss"))
    if rss is not None:
        return rss, HOST_PEAK
    return None, ""


def _bytes(x: Any) -> int | None:
    """A byte count read from a file: a finite, non-negative number, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x < 0 or x > 2**62:
        return None
    return int(x)


def peak_of(mems: Iterable[Mapping[str, Any] | None]) -> tuple[float | None, str]:
    """The largest peak over several measurements, in MiB, and its counter (a GPU figure wins)."""
    gpu: list[int] = []
    host: list[int] = []
    for m in mems:
        v, counter = mem_peak(m)
        if v is not None:
            (gpu if counter == GPU_PEAK else host).append(v)
    if gpu:
        return max(gpu) / MIB, GPU_PEAK
    if host:
        return max(host) / MIB, HOST_PEAK
    return None, ""


@dataclass
class RunState:
    id: str
    dir: Path
    status: str
    phase: str | None
    stop_reason: str
    started: float | None
    ended: float | None
    peak_mib: float | None
    peak_counter: str
    gates: list[ev.Event] = field(default_factory=list)
    run_end: ev.Event | None = None

    @property
    def duration_s(self) -> float | None:
        """Wall seconds from the run's first event to its last (now, while it runs); None when unknown.

        The events' times are the wall clock's: one stepped back during the run (a VM's clock resynchronised)
        puts the end before the start, and that span is unknown, never a negative figure (the notebook refuses
        one, which failed every write of the run's row)."""
        if self.started is None:
            return None
        end = self.ended if self.ended is not None else time.time()
        return end - self.started if end >= self.started else None

    @property
    def final(self) -> bool:
        return self.status not in (ev.Status.CREATED.value, ev.Status.RUNNING.value)

    @property
    def exit_code(self) -> ev.ExitCode:
        return ev.exit_code_of(self.status, self.run_end)


# From worst to best: the run's status is its worst rank's.
_SEVERITY = ["crashed", "oom", "diverged", "error", "failed", "stopped", "running", "created", "completed", "passed"]


def _rank_end(evs: list[ev.Event], world: int, alive: bool) -> tuple[str, str, str | None, ev.Event | None]:
    """Status, reason, phase and final event of a distributed run, from every rank's events."""
    ends = {_int(e.get("rank"), 0): e for e in ev.iter_kind(evs, ev.RUN_END)}
    missing = [r for r in range(world) if r not in ends]
    if missing and alive:
        return ev.Status.RUNNING.value, "", ev.last_phase(evs), None
    bad = [
        f"rank {r}: {e.get('stop_reason', '')}"
        for r, e in sorted(ends.items())
        if e.get("status") not in ("passed", "completed")
    ]
    if missing:
        lost = [
            f"rank {r} ended without a final event during phase {ev.last_phase(evs, r) or 'start-up'}" for r in missing
        ]
        reason = "; ".join(lost + bad)
        phase = ev.last_phase(evs, missing[0])
        end: ev.Event = {
            "v": ev.SCHEMA_VERSION,
            "kind": ev.RUN_END,
            "status": ev.Status.CRASHED.value,
            "stop_reason": reason,
            "exit_code": int(ev.ExitCode.RANK_FAILED),
            "phase": phase,
        }
        return ev.Status.CRASHED.value, reason, phase, end
    worst = min(ends.values(), key=lambda e: _SEVERITY.index(e["status"]) if e.get("status") in _SEVERITY else 0)
    reason = "; ".join(bad) or f"{worst.get('stop_reason', '')} on all {world} ranks"
    return str(worst.get("status", "error")), reason, worst.get("phase"), worst


def last_generation(evs: list[ev.Event]) -> int:
    """Where the latest process of the run begins in its events (a resumed run has one per process)."""
    begin, ended = 0, False
    for i, e in enumerate(evs):
        kind = e.get("kind")
        if kind == ev.RUN_END:
            ended = True
        elif kind == ev.RUN_START and ended:
            begin, ended = i, False
    return begin


def state(rdir: Path | str, evs: list[ev.Event] | None = None) -> RunState:
    """What the run folder says now. Reads its events' summary (bounded; see :mod:`.brief`)
    unless ``evs`` is given (a reader that follows the file itself)."""
    rdir = Path(rdir)
    last_t: float | None
    if evs is None:
        brief = run_summary(rdir)
        evs, last_t = brief.events, brief.last_t
    else:
        last_t = _time(evs[-1]) if evs else None
    first = next(ev.iter_kind(evs, ev.RUN_START), None)
    gates = ev.gates(evs)
    sizing = [g for g in gates if g.get("phase") not in CHECK_PHASES] or gates
    peak, counter = peak_of([g.get("mem") for g in sizing] + [e.get("mem") for e in ev.iter_kind(evs, ev.RUN_END)])
    evs = evs[last_generation(evs) :]  # how the run stands is its latest process's word
    start = next(ev.iter_kind(evs, ev.RUN_START), None)
    end = next(ev.iter_kind(evs, ev.RUN_END), None)
    phase = ev.last_phase(evs)
    started = _time(first)  # the run began with its first process; a resumed run keeps that start
    world = _int((start or {}).get("world"), 1)
    if world > 1 and start is not None:
        status, reason, ph, end = _rank_end(evs, world, is_alive(rdir))
        phase = ph or phase
        ended = None
        if status != ev.Status.RUNNING.value:
            ended = max((t for e in ev.iter_kind(evs, ev.RUN_END) if (t := _time(e)) is not None), default=last_t)
        return RunState(rdir.name, rdir, status, phase, reason, started, ended, peak, counter, gates, end)
    if end is not None:
        status = str(end.get("status", ev.Status.ERROR.value))
        reason = str(end.get("stop_reason", ""))
        phase = end.get("phase") or phase
    elif is_alive(rdir):
        status, reason = ev.Status.RUNNING.value, ""
    elif (remote := remote_info(rdir)) is not None:  # a Ray task on another node: its record says how it ended
        status = ev.Status.CRASHED.value
        lost = str(remote.get("reason") or "") or (
            "its task ended without a final event"
            if remote.get("ended")
            else "nothing holds its Ray task any more (the series' keeper on the head, or the head's Ray, ended)"
        )
        where = (
            f" on node {remote.get('hostname')} ({str(remote.get('node_id', ''))[:12]})"
            if remote.get("node_id")
            else ""
        )
        reason = f"remote run{where}: {lost}, during phase {phase or 'start-up'}"
    elif process_info(rdir) is None and start is None and not never_started(rdir):
        status, reason = ev.Status.CREATED.value, ""
    elif process_info(rdir) is None and start is None:
        status = ev.Status.CRASHED.value
        reason = (
            f"never started: no process was recorded within {CREATED_GRACE_S:g} s of its creation "
            "(the launcher ended before starting it)"
        )
    else:
        status = ev.Status.CRASHED.value
        reason = f"process ended without a final event during phase {phase or 'start-up'}"
    ended = _time(end) if end else (last_t if status == ev.Status.CRASHED.value else None)
    return RunState(rdir.name, rdir, status, phase, reason, started, ended, peak, counter, gates, end)


# A run folder with no process recorded this long after its run.toml was written will never
# start: its launcher died between creating it and starting its process.
CREATED_GRACE_S = 120.0


def never_started(rdir: Path) -> bool:
    try:
        age = time.time() - os.lstat(rdir / RUN_FILE).st_mtime
    except OSError:
        return False
    return age > CREATED_GRACE_S


def _time(e: ev.Event | None) -> float | None:
    t = e.get("t") if e is not None else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


def _int(x: Any, default: int) -> int:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1_000_000 else default


def list_runs(campaign_dir: Path | str) -> list[RunState]:
    return [state(p) for p in run_dirs(campaign_dir)]


# --------------------------------------------------------------------------- the run as one record


@dataclass
class RunFiles:
    """One run folder read once: what it is (run.toml), how it went (events) and its results."""

    id: str
    dir: Path
    kind: str
    variant: str
    seed: int
    status: str
    stop_reason: str
    phase: str | None
    frozen: RunToml = field(default_factory=lambda: RunToml())
    events: list[ev.Event] = field(default_factory=list)
    metrics: ev.Metrics | None = None  # training runs: metrics.json
    state: RunState | None = None
    summary: Summary | None = None  # the events' summary (counts, largest step, time of the last event)

    @property
    def run_start(self) -> ev.Event:
        none: ev.Event = {"v": ev.SCHEMA_VERSION, "kind": ev.RUN_START}  # a run whose process never started
        return next(ev.iter_kind(self.events, ev.RUN_START), none)

    @property
    def gates(self) -> list[ev.Event]:
        return ev.gates(self.events)

    def gate(self, phase: str) -> ev.Event | None:
        return next((g for g in ev.gates(self.events) if g.get("phase") == phase), None)

    @property
    def stack(self) -> ev.Stack:
        """The software stack the run measured on: its run_start's, with what its stack gate found on top
        (a probe's run process only watches; the stack gate comes from the script's own interpreter)."""
        out: ev.Stack = {}
        for found in (self.run_start.get("stack"), (self.gate("stack") or {}).get("stack")):
            if isinstance(found, dict):  # a line of the file, which may hold anything
                out.update(found)
        return out

    @property
    def probed(self) -> bool:
        """A probe: an unmodified script measured from outside (no data gates, the script's own batches)."""
        return self.kind == "probe"

    @property
    def noun(self) -> str:
        """How texts name the run that measured a variant: "pilot" or "probe"."""
        return "probe" if self.probed else "pilot"

    @property
    def params(self) -> Params:
        """The parameters the run actually used (its run_start, else its frozen run.toml)."""
        return dict(self.run_start.get("params") or self.frozen.get("params") or {})

    def step_time(self) -> ev.StepTime | None:
        """A pilot's time per update: the median of its timed later updates and their spread (min, max, n)."""
        g = self.gate("update_second")
        st = (g or {}).get("step_time")
        if isinstance(st, dict) and isinstance(st.get("median"), (int, float)):
            return st
        times = sorted(
            float(d)
            for e in ev.iter_kind(self.events, ev.STEP)
            if e.get("phase") == "update_second" and isinstance(d := e.get("duration_s"), (int, float))
        )
        if not times:
            return None
        mid = times[len(times) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
        return {"median": mid, "min": times[0], "max": times[-1], "n": len(times), "samples": times}

    @property
    def peak(self) -> tuple[float | None, str]:
        """The run's peak in MiB and its counter, by the one rule."""
        if self.state is not None and self.state.peak_mib is not None:
            return self.state.peak_mib, self.state.peak_counter
        return peak_of([(self.metrics or {}).get("peak")])


def read_run(rdir: Path | str) -> RunFiles | None:
    """One run folder as a record; its ``events`` are the summary's (every structural event, the last
    evals and logs, the first and last step of each phase and rank), never the whole file."""
    rdir = Path(rdir)
    try:
        frozen = read_run_toml(rdir)
    except (OSError, ValueError, RecursionError):
        return None
    brief = run_summary(rdir)
    evs = brief.events
    st = state(rdir)  # the same summary, from this process's memo
    meta = frozen.get("run", {}) if isinstance(frozen.get("run"), dict) else {}
    metrics = read_metrics(rdir) or None
    return RunFiles(
        id=str(meta.get("id", rdir.name)),
        dir=rdir,
        kind=str(meta.get("kind", "pilot")),
        variant=str(meta.get("variant", "")),
        seed=meta["seed"] if isinstance(meta.get("seed"), int) and not isinstance(meta.get("seed"), bool) else 0,
        status=st.status,
        stop_reason=st.stop_reason,
        phase=st.phase,
        frozen=frozen,
        events=evs,
        metrics=metrics,
        state=st,
        summary=brief,
    )


def campaign_runs(campaign_dir: Path | str) -> list[RunFiles]:
    """Every run of the campaign, oldest first."""
    return [r for p in run_dirs(campaign_dir) if (r := read_run(p)) is not None]


# Runs that measure a variant's phases: a pilot (the task under Cockpit's loop) or a probe (the user's own
# script, measured from outside). Only a pilot clears a variant for a series, which trains the task.
MEASURED_KINDS = ("pilot", "probe")


def latest_passed_pilot(all_runs: list[RunFiles], variant: str, kinds: tuple[str, ...] = ("pilot",)) -> RunFiles | None:
    """The newest pilot of the variant whose every gate passed (warnings allowed); ``kinds=MEASURED_KINDS``
    (see :func:`latest_measured`) also takes a passed probe."""
    from .files import order_key

    passed = [r for r in all_runs if r.kind in kinds and r.variant == variant and r.status == ev.Status.PASSED.value]
    return max(passed, key=lambda r: order_key(r.id)) if passed else None


def latest_measured(all_runs: list[RunFiles], variant: str) -> RunFiles | None:
    """The newest passed pilot or probe of the variant: what the sheet, the plan and compare size and time from."""
    return latest_passed_pilot(all_runs, variant, MEASURED_KINDS)


def training_runs(all_runs: list[RunFiles], variant: str | None = None) -> list[RunFiles]:
    return [r for r in all_runs if r.kind == "train" and (variant is None or r.variant == variant)]
