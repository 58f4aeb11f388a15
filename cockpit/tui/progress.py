"""How far a run or a series is, and when it should end, from measured step times. No textual.

A train run's ETA is its updates still to do times its mean measured time per
update (the step events' ``duration_s``, rank 0); nothing is guessed before
one update is timed. A series' ETA adds the runs waiting, each at the mean
time per update measured in that series (or, for a variant not timed yet, in
the series as a whole), and divides by how many run at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import format as fm

if TYPE_CHECKING:
    from ..series import Series
    from .feeds import Feeds
    from .ingest import RunFeed


@dataclass(frozen=True)
class Progress:
    done: int
    planned: int | None
    step_s: float | None  # mean measured seconds per update

    @property
    def left_s(self) -> float | None:
        if self.planned is None or self.step_s is None:
            return None
        return max(0, self.planned - self.done) * self.step_s

    def words(self) -> str:
        out = f"update {self.done}" + (f"/{self.planned}" if self.planned else "")
        if self.planned:
            out += f" ({100 * min(self.done, self.planned) / self.planned:.0f}%)"
        if self.step_s is not None:
            out += f", {self.step_s:.3g} s/update"
        left = self.left_s
        if left is not None and self.planned and self.done < self.planned:
            out += f", ETA {fm.duration(left)}"
        return out


def train_progress(feed: RunFeed) -> Progress:
    step = (feed.last_step or {}).get("step")
    done = int(step) if isinstance(step, (int, float)) else 0
    step_s = feed.step_seconds / feed.steps_timed if feed.steps_timed else None
    return Progress(done, feed.planned_updates, step_s)


def pilot_progress(feed: RunFeed, running: bool, now: float | None = None) -> str:
    """A pilot in words: gates done of planned, and (while it runs) the phase running and for how long."""
    done = sum(1 for p in feed.phases if p in feed.gates)
    out = f"{done}/{len(feed.phases)} gates"
    if running and feed.end is None and feed.phase and feed.phase not in feed.gates:
        started = feed.phase_started(feed.phase)
        out += f", {feed.phase} running"
        if started is not None:
            out += f" for {fm.duration(max(0.0, (now or time.time()) - started))}"
    return out


def series_eta(series: Series, feeds: Feeds) -> str:
    """The series' remaining time, from the step times its runs measured; "" before any was measured."""
    per_variant: dict[str, list[float]] = {}
    left = 0.0
    unknown = 0
    active = series.active
    for s in active:
        feed = feeds.get(s.run_id)
        if feed is None:
            unknown += 1
            continue
        p = train_progress(feed)
        if p.step_s is not None:
            per_variant.setdefault(s.item.variant, []).append(p.step_s)
        if p.left_s is None:
            unknown += 1
        else:
            left += p.left_s
    planned_of = {s.item.variant: feeds.get(s.run_id) for s in series.started}
    every = [x for xs in per_variant.values() for x in xs]
    overall = sum(every) / len(every) if every else None
    for item in series.pending:
        times = per_variant.get(item.variant)
        step_s = sum(times) / len(times) if times else overall
        feed = planned_of.get(item.variant)
        planned = item.overrides.updates or (feed.planned_updates if feed is not None else None)
        if step_s is None or not planned:
            unknown += 1
            continue
        left += planned * step_s
    if overall is None:
        return ""
    eta = left / max(1, series.parallel)
    return f"ETA {fm.duration(eta)}" + (f" (+{unknown} runs not timed yet)" if unknown else "")
