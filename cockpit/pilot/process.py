"""One skeleton for every run process, pilot or training, and one classification of how it ended.

A run process reads its frozen ``run.toml``, writes ``run_start``, starts the
sampler, runs its body, and always ends with one ``run_end`` carrying the
status, the exit code and the reason: :func:`outcome_of` is the one place that
turns an exception into an outcome (stopped, diverged, oom, an error in the
task's code, an error in Cockpit). The row in the notebook is then written by
``cockpit.runs.settle_run`` (rank 0).
"""

from __future__ import annotations

import enum
import os
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .. import blame, fsutil, runs
from .. import events as ev
from ..contract import Params
from ..notebook.settings import Settings
from . import signals
from .meter import Meter, stack_info
from .signals import Stopped
from .task import TaskError
from .trainer import NonFinite, UserCodeError, is_collective_failure, is_oom, resolve_device


class Cause(enum.Enum):
    """What ended a run or a phase: the one classification of an exception, in the order it is decided."""

    STOPPED = "stopped"  # a stop signal, whatever it turned into on its way up (torch.save: a RuntimeError)
    DISK_FULL = "disk full"  # no space left, however deep in the chain of causes
    NON_FINITE = "non-finite"
    USER_CODE = "task code"  # the task's own code raised
    TASK = "task"  # the task or the campaign cannot do what is asked: the user's to fix
    OOM = "out of memory"
    COLLECTIVE = "collective"  # a distributed collective timed out or lost its peer
    INTERNAL = "internal"  # a bug in Cockpit


def cause_of(exc: BaseException) -> Cause:
    """Which kind of ending ``exc`` is. A stop wins over everything; a full disk over what it was raised in."""
    if signals.stopped_by(exc) or signals.received():
        return Cause.STOPPED
    if fsutil.disk_full(exc) is not None:
        return Cause.DISK_FULL
    if isinstance(exc, NonFinite):
        return Cause.NON_FINITE
    if isinstance(exc, UserCodeError):
        return Cause.USER_CODE
    if isinstance(exc, TaskError):
        return Cause.TASK
    if is_oom(exc):
        return Cause.OOM
    if is_collective_failure(exc):
        return Cause.COLLECTIVE
    if blame.of(exc).user:  # the one rule: raised in the user's code, or on the state it left
        return Cause.USER_CODE
    return Cause.INTERNAL


def outcome_of(exc: BaseException, at: str, params: Params | None = None) -> ev.Outcome:
    """How a run ended from the exception that ended it. ``at`` says where ("in validation").

    The kind of ending is :func:`cause_of`'s; this says it in the run's words, prints the traceback of an
    exception in the task's code or in Cockpit to output.log, and frees the allocator's cache after an OOM.
    """
    cause = cause_of(exc)
    if cause is Cause.STOPPED:
        name = signals.received() or (str(exc) if isinstance(exc, Stopped) else "")
        sig = f" ({name})" if name else ""
        return ev.Outcome.of(ev.Status.STOPPED, f"stopped by signal{sig} {at}")
    if cause is Cause.DISK_FULL:
        full = fsutil.disk_full(exc)
        where = f" writing {full.filename}" if full is not None and getattr(full, "filename", None) else ""
        return ev.Outcome.of(
            ev.Status.ERROR,
            f"disk full: no space left on the device{where} {at}; free space (old checkpoints, "
            "artifacts, caches) and run it again",
            ev.ExitCode.DISK_FULL,
        )
    if isinstance(exc, NonFinite):
        value = f" ({exc.value})" if exc.value is not None else ""
        return ev.Outcome.of(ev.Status.DIVERGED, f"non-finite {exc.what} {at}{value}")
    if cause is Cause.USER_CODE:
        err = blame.user_error(exc, params) or UserCodeError("task code", exc)
        b = blame.of(err, params)
        tb = "".join(traceback.format_exception(err.exc))
        print(f"--- exception in the task's {blame.called(err.where)} {at} ---\n{tb}", file=sys.stderr, flush=True)
        return ev.Outcome.of(ev.Status.ERROR, user_words(err, b, at))
    if cause is Cause.TASK:
        return ev.Outcome.of(ev.Status.ERROR, f"task: {exc}", ev.ExitCode.USAGE)
    if cause is Cause.OOM:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return ev.Outcome.of(ev.Status.OOM, f"out of memory {at}: {first}")
    if cause is Cause.COLLECTIVE:
        return ev.Outcome.of(
            ev.Status.ERROR, f"a collective failed {at}: {str(exc).splitlines()[0][:200]}", ev.ExitCode.RANK_FAILED
        )
    print(f"--- internal error {at} ---\n{''.join(traceback.format_exception(exc))}", file=sys.stderr, flush=True)
    return ev.Outcome.of(
        ev.Status.ERROR,
        f"internal error {at}: {type(exc).__name__}: {exc} (a bug in Cockpit; traceback in output.log)",
        ev.ExitCode.INTERNAL,
    )


def user_words(err: UserCodeError, b: blame.Blame, at: str) -> str:
    """A run ended by the user's code, in one line: what raised, where, at which line, and what to do."""
    where = f" ({b.where})" if b.where else ""
    if b.state is not None:
        return f"{b.state.label} ({type(err.exc).__name__} in the backward of the task's loss) {at}: {b.remedy}"
    remedy = f": {b.remedy}" if b.remedy else ""
    fn = blame.called(err.where)
    return f"{fn} raised {type(err.exc).__name__}: {blame.first_line(err.exc)} {at}{where}{remedy}"


class RunProcess:
    """What every run process does around its body: run_start, sampler, run_end, the notebook row."""

    kind = "pilot"

    def __init__(self, rdir: Path, writer: ev.EventWriter, rank: int = 0, world: int = 1, sample_hz: float = 20.0):
        self.rdir = Path(rdir)
        self.writer = writer
        self.frozen = runs.read_run_toml(self.rdir)
        self.params: Params = dict(self.frozen["params"])
        self.seed = int(self.frozen["run"]["seed"])
        self.variant = str(self.frozen["run"].get("variant", ""))
        self.rank, self.world = rank, world
        self.device = resolve_device(Settings(self.params).device)
        if self.device.type == "cuda" and world > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        self.meter = Meter(self.device, emit=writer.emit, sample_hz=sample_hz)
        self.phase = "start-up"
        self.t0 = time.monotonic()  # durations never move with the wall clock (it may step, either way)

    def emit(self, kind: str, **payload: Any) -> object:
        return self.writer.emit(kind, **payload)

    def log(self, message: str, level: str = "info") -> None:
        print(f"[{level}] {message}", flush=True)
        self.emit(ev.LOG, level=level, message=message)

    # ---- what a kind of run adds

    def start_fields(self) -> dict[str, ev.JSON]:
        return {}

    def body(self) -> ev.Outcome:
        """The run's own work (the pilot's phases, a training run's updates): each kind of run overrides it."""
        raise NotImplementedError

    def current_phase(self) -> str:
        return self.phase

    def where(self) -> str:
        """Where the run was when something ended it, in words ("in validation")."""
        return f"in {self.current_phase()}"

    def finish(self, outcome: ev.Outcome) -> ev.Outcome:
        """Work after the body, whatever its outcome (a training run's final checkpoint); may change it."""
        return outcome

    def end_fields(self, outcome: ev.Outcome) -> Mapping[str, object]:
        """What this kind of run adds to its run_end (ev.RunEndFigures for a pilot and a training run)."""
        return {}

    # ---- the skeleton

    def run(self) -> int:
        from . import threads as threads_

        threads = threads_.fit_torch_threads()  # before any work: intra-op threads to the CPUs this process may use
        self.emit(
            ev.RUN_START,
            run_id=self.frozen["run"]["id"],
            campaign=self.frozen["run"].get("campaign"),
            variant=self.variant,
            seed=self.seed,
            run_kind=self.kind,
            follows=self.frozen["run"].get("follows", ""),
            pid=os.getpid(),
            params=self.params,
            stack={**stack_info(self.device, self.meter.nvml), "threads": threads, **threads_.thread_settings()},
            world=self.world,
            **self.start_fields(),
        )
        self.meter.start_sampler()
        try:
            outcome = self.body()
        except BaseException as exc:  # noqa: BLE001 - every ending is classified, never a bare crash
            outcome = outcome_of(exc, self.where(), self.params)
        finally:
            self.meter.stop_sampler()
        outcome = self.finish(outcome)
        if outcome.code == ev.ExitCode.DISK_FULL:
            fsutil.release()  # the room set aside at the start: enough for the final event and the row
        extra = self.end_fields(outcome)
        self.emit(
            ev.RUN_END,
            **ev.run_end_fields(outcome, self.current_phase()),
            duration_s=time.monotonic() - self.t0,
            **extra,
        )
        return int(outcome.code)
