"""A series running: its items started detached, ``parallel`` at a time. No torch.

:class:`Series` is non-blocking (``poll()``) so the TUI can drive it on a
timer; :meth:`Series.run` is the blocking loop the CLI uses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from .. import events as ev
from .. import launch, runs
from .. import notebook as nbm
from ..errors import UsageError
from ..schema import JSON
from .items import Item

if TYPE_CHECKING:
    from ..gpus import Placement


@dataclass
class Started:
    item: Item
    run_id: str
    dir: Path
    tail: ev.Tail
    finished: bool = False
    state: runs.RunState | None = None
    gpus: list[int] = field(default_factory=list)  # the GPUs lent to it (CUDA_VISIBLE_DEVICES)


class Series:
    """Start items detached, at most ``parallel`` alive at once; ``poll()`` advances without blocking."""

    def __init__(
        self,
        campaign: Path | str,
        items: list[Item],
        parallel: int = 1,
        env: dict[str, str] | None = None,
        starter: Callable[..., tuple[str, Path]] | None = None,
        resumer: Callable[..., Path] | None = None,
        placement: Placement | None = None,
        nproc: int = 1,
        pump: Callable[[], None] | None = None,
    ):
        """``placement`` (a ``cockpit.gpus.Placement``) lends each run GPUs of its own, ``nproc`` per run.

        ``pump`` is called first on every poll: a series on a Ray cluster tells its keeper there, once, that every
        run is submitted (``cockpit.cluster.onray.Cluster.pump``); the keeper brings the runs' files back to their
        folders, so everything here reads them as local runs."""
        if parallel < 1:
            raise UsageError(f"--parallel {parallel}: give a whole number >= 1")
        self.placement = placement
        self.nproc = max(1, nproc)
        self.campaign = nbm.find(campaign)
        self.pending: deque[Item] = deque(items)
        self.parallel = parallel
        self.env = dict(env or {})
        if parallel > 1 and "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in self.env:
            # CPU runs side by side: share the cores instead of oversubscribing them.
            self.env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // parallel))
        self._start: Callable[..., tuple[str, Path]] = starter or launch.new_run
        self._resume = resumer or launch.resume_run
        self._pump = pump
        self.started: list[Started] = []
        self.t0 = time.monotonic()

    @property
    def active(self) -> list[Started]:
        return [s for s in self.started if not s.finished]

    @property
    def done(self) -> bool:
        return not self.pending and not self.active

    def poll(self) -> list[tuple[str, Started]]:
        """Reap finished runs, start the next ones; returns ("finished"|"started"|"attached", run) changes."""
        changes: list[tuple[str, Started]] = []
        if self._pump is not None:
            self._pump()
        launch.reap()
        for s in self.active:
            if not runs.is_alive(s.dir):
                launch.reap()
                s.finished = True
                s.state = runs.state(s.dir)
                if self.placement is not None:
                    self.placement.release(s.gpus)
                if s.state.status == ev.Status.CRASHED.value:  # killed: its process could not write its row
                    runs.settle_run(self.campaign, s.dir)
                    # nor sweep its folder (its disk reserve, a half-written checkpoint): a settled row is never
                    # looked at again, so what its killed writers left goes now
                    runs.sweep(s.dir)
                changes.append(("finished", s))
        while self.pending and len(self.active) < self.parallel:
            lent: list[int] = []
            env = dict(self.env)
            if self.placement is not None and self.parallel > 1:
                got = self.placement.assign(self.nproc)
                if got is None:
                    break  # every GPU is as full as the pilots' peaks allow: wait for a run to end
                lent = got
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, lent))
            item = self.pending.popleft()
            if item.attach:  # a run an earlier series' keeper still holds: followed from its first event
                adir = runs.run_dir(self.campaign.parent, item.attach)
                s = Started(item, item.attach, adir, ev.Tail(adir / ev.EVENTS_FILE), gpus=lent)
                self.started.append(s)
                changes.append(("attached", s))
                continue
            if item.resume:
                events = runs.run_dir(self.campaign.parent, item.resume) / ev.EVENTS_FILE
                seen = events.stat().st_size if events.is_file() else 0  # its earlier processes' events are old news
                rdir = self._resume(self.campaign, item.resume, env=env or None)
                s = Started(item, item.resume, Path(rdir), ev.Tail(events, offset=seen), gpus=lent)
                self.started.append(s)
                changes.append(("started", s))
                continue
            rid, rdir = self._start(
                self.campaign,
                item.variant,
                item.seed,
                kind="train",
                follows=item.follows,
                overrides=item.overrides.flat() or None,
                env=env or None,
                **({"notes": item.notes} if item.notes else {}),
            )
            s = Started(item, rid, Path(rdir), ev.Tail(Path(rdir) / ev.EVENTS_FILE), gpus=lent)
            self.started.append(s)
            changes.append(("started", s))
        return changes

    def progress(self) -> list[tuple[Started, ev.Event]]:
        """New eval and run_end events of the runs started so far (for live lines)."""
        out: list[tuple[Started, ev.Event]] = []
        for s in self.started:
            for e in s.tail.read_new():
                if e.get("kind") in (ev.EVAL, ev.RUN_END, ev.RUN_START):
                    out.append((s, e))
        return out

    def stop(self) -> list[str]:
        """Stop the runs still alive (SIGTERM, then SIGKILL) and drop the ones not started."""
        self.pending.clear()
        if self._pump is None:
            return [f"{s.run_id}: {launch.stop(s.dir)}" for s in self.active]
        # Runs on a Ray cluster: this series holds their tasks, so it asks each to stop and brings their ends back.
        active = self.active
        for s in active:
            runs.request_stop(s.dir, 10.0)
        deadline = time.monotonic() + 10.0 + launch.REMOTE_STOP_MARGIN_S
        while any(runs.is_alive(s.dir) for s in active) and time.monotonic() < deadline:
            self._pump()
            time.sleep(0.2)
        return [f"{s.run_id}: {runs.state(s.dir).status}" for s in active]

    def run(
        self,
        on_change: Callable[[str, Started], None] | None = None,
        on_progress: Callable[[Started, ev.Event], None] | None = None,
        poll_s: float = 0.5,
    ) -> list[Started]:
        while True:
            for what, s in self.poll():
                if on_change:
                    on_change(what, s)
            for s, e in self.progress():
                if on_progress:
                    on_progress(s, e)
            if self.done:
                break
            time.sleep(poll_s)
        runs.settle(self.campaign)
        return self.started


class Result(TypedDict):
    """One line of a series summary (``cockpit series --json``)."""

    run: str
    variant: str
    seed: int
    follows: str
    status: str
    stop_reason: str
    updates: JSON
    planned_updates: JSON
    final_val_loss: JSON
    best_val_loss: JSON
    step_time_s: JSON
    duration_s: float | None
    dir: str


def result(s: Started) -> Result:
    """One line of a series summary: the run's state and its metrics.json (if it wrote one)."""
    st = s.state or runs.state(s.dir)
    metrics = runs.read_metrics(s.dir)
    return {
        "run": s.run_id,
        "variant": s.item.variant,
        "seed": s.item.seed,
        "follows": s.item.follows,
        "status": st.status,
        "stop_reason": st.stop_reason,
        "updates": metrics.get("updates"),
        "planned_updates": metrics.get("planned_updates"),
        "final_val_loss": metrics.get("final_val_loss"),
        "best_val_loss": metrics.get("best_val_loss"),
        "step_time_s": metrics.get("step_time_s"),
        "duration_s": st.duration_s,
        "dir": str(s.dir),
    }


def in_background(campaign_dir: Path, argv: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
    """``cockpit series`` started in a session of its own, its output in ``runs/.series-<time>.log``: what
    ``--detach`` does, and how the TUI starts a series on a Ray cluster (the Ray driver is that process, never
    the TUI; the runs it starts are held by the series' keeper, and the TUI follows them from their folders)."""
    rd = runs.runs_dir(campaign_dir)
    rd.mkdir(parents=True, exist_ok=True)
    log_path = rd / f".series-{time.strftime('%Y%m%d-%H%M%S')}.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cockpit", "series", str(campaign_dir), *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    return proc, log_path
