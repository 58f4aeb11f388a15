"""A series (``cockpit.series.Series``) driven from the TUI, without ever blocking it.

A timer hands ``Series.poll`` to a worker thread, which reaps the finished
runs and starts the next ones detached; the worker ends by posting
:class:`~cockpit.tui.messages.SeriesPolled`, which the application hands back
to :meth:`SeriesDriver.polled` on the UI thread. Polls never overlap: a tick
that finds the previous poll still running does nothing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.timer import Timer

from .. import notebook as nbm
from .messages import SeriesPolled, SeriesStopped

if TYPE_CHECKING:  # cockpit.series (and launch) when a series starts: not before the TUI's first frame
    from .. import series as sr


@dataclass
class SeriesChoice:
    """A series the dialog planned and the guard let through: its items, and the overrides' decisions."""

    items: list[sr.Item]
    parallel: int = 1
    updates: int | None = None
    decisions: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)  # what the dialog chose: a Ray series is started by them
    seeds: list[int] = field(default_factory=list)
    why: str | None = None  # the override's text


@dataclass
class RaySeries:
    """A series the TUI started on a Ray cluster: ``cockpit series --ray`` in the background, its own driver."""

    address: str
    proc: subprocess.Popen[bytes]
    log: Path
    runs: int  # how many runs it was started with

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class SeriesDriver:
    """The series started from this TUI (at most one at a time), its timer and its notifications."""

    def __init__(self, app: App[Any], notebook_path: Path, start: Callable[..., int], interval_s: float) -> None:
        self.app = app
        self.notebook_path = notebook_path
        self._start_process = start
        self.interval_s = interval_s
        self.series: sr.Series | None = None
        self.remote: RaySeries | None = None  # a series on the notebook's Ray cluster, started from here
        self.started: list[str] = []  # run ids, in the order they started
        self._timer: Timer | None = None
        self.busy = False  # a poll is running in a thread (it writes campaign.toml itself)

    # ---- state

    @property
    def running(self) -> bool:
        if self.remote is not None and self.remote.alive:
            return True
        return self.series is not None and not self.series.done

    def status(self) -> str:
        """The series in a few words, for the campaign screen."""
        r = self.remote
        if r is not None and (r.alive or self.series is None):
            state = "starting its runs" if r.alive else f"its command ended ({r.proc.returncode})"
            return f"series of {r.runs} runs on the Ray cluster at {r.address}: {state}; log {r.log.name}"
        s = self.series
        if s is None:
            return ""
        finished = [x for x in s.started if x.finished]
        outcomes: dict[str, int] = {}
        for x in finished:
            status = x.state.status if x.state else "?"
            outcomes[status] = outcomes.get(status, 0) + 1
        total = len(s.started) + len(s.pending)
        words = ", ".join(f"{n} {k}" for k, n in outcomes.items())
        out = f"series {len(finished)}/{total} done" + (f" ({words})" if words else "")
        if s.active:
            out += f", running {', '.join(x.run_id for x in s.active)}"
        if s.pending:
            out += f", {len(s.pending)} waiting"
        return out

    # ---- starting and following

    def start(self, choice: SeriesChoice) -> bool:
        """Start a planned and guarded series (its overrides recorded first), then follow it from a timer."""
        from .. import series as sr
        from ..errors import CockpitError

        items, parallel, updates = choice.items, choice.parallel, choice.updates
        if not items:
            self.app.notify("nothing to run", title="series", severity="warning")
            return False
        from .. import cluster

        try:
            address = cluster.address(nbm.load(self.notebook_path), None)
        except (CockpitError, nbm.NotebookError) as exc:
            self.app.notify(str(exc), title="series not started", severity="error", timeout=20)
            return False
        if address is not None:
            return self._start_on_ray(choice, address)
        try:
            notes = sr.parallel_check(self.notebook_path, [i.variant for i in items], parallel)
            series = sr.Series(
                self.notebook_path, items, parallel=parallel, starter=self._starter, resumer=self._resumer
            )
            sr.record_decisions(self.notebook_path, choice.decisions)
        except (CockpitError, nbm.NotebookError) as exc:
            self.app.notify(str(exc), title="series not started", severity="error", timeout=20)
            return False
        self.series, self.started = series, []
        if any(i.resume for i in items):
            budget = "each from its newest checkpoint, as the same run"
        elif updates:
            budget = f"{updates} updates each (a quick look, recorded in each run)"
        else:
            budget = "the notebook's budget"
        said = [f"{len(items)} runs, {parallel} at a time, {budget}", *notes]
        said += [f"decision recorded: {d}" for d in choice.decisions]
        self.app.notify("\n".join(said), title="series")
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.app.set_interval(self.interval_s, self.tick)
        self.tick()
        return True

    def _start_on_ray(self, choice: SeriesChoice, address: str) -> bool:
        """The notebook names a Ray cluster (``[cluster] ray``): the series goes there as ``cockpit series --ray``
        in the background, which checks the nodes, records the decisions and hands the runs to its keeper; the
        runs appear in the notebook as it creates them, and their screens follow them from their folders."""
        from .. import cluster
        from .. import series as sr
        from ..errors import CockpitError

        argv = ["--ray", address]
        resumed = [i.resume for i in choice.items if i.resume]
        if resumed:
            argv += ["--resume", *resumed]
        else:
            argv += ["--variants", ",".join(choice.variants), "--seeds", ",".join(str(s) for s in choice.seeds)]
            if choice.updates:
                argv += ["--updates", str(choice.updates)]
            if choice.why:
                argv += ["--without-pilot", choice.why, "--again", choice.why]
        try:
            cluster.need_ray("a series on the notebook's Ray cluster")
            proc, log = sr.in_background(self.notebook_path.parent, argv)
        except (CockpitError, OSError) as exc:
            self.app.notify(str(exc), title="series not started", severity="error", timeout=20)
            return False
        self.remote, self.series = RaySeries(address, proc, log, len(choice.items)), None
        self.app.notify(
            f"{len(choice.items)} runs on the Ray cluster at {address} ([cluster] ray), started in the background "
            f"(pid {proc.pid}): it checks the nodes, then hands each run to the series' keeper; the runs appear as "
            f"it creates them. Its words: {log}",
            title="series",
            timeout=15,
        )
        return True

    def resume(self) -> bool:
        """Go on with every stopped or crashed training run that has a periodic checkpoint, one at a time."""
        from .. import series as sr
        from ..errors import CockpitError

        try:
            items = sr.resumable(nbm.load(self.notebook_path))
        except (CockpitError, nbm.NotebookError) as exc:
            self.app.notify(str(exc), title="nothing resumed", severity="error", timeout=20)
            return False
        if not items:
            self.app.notify(
                "no stopped or crashed training run has a periodic checkpoint to go on from",
                title="nothing to resume",
                severity="warning",
            )
            return False
        return self.start(SeriesChoice(items))

    def _starter(self, campaign: Path, variant: str, seed: int, **kw: Any) -> tuple[str, Path]:
        """``launch.new_run`` through the app's launcher (tests start a harmless process)."""
        from .. import launch

        return launch.new_run(campaign, variant, seed, starter=self._start_process, **kw)

    def _resumer(self, campaign: Path, rid: str, **kw: Any) -> Path:
        """``launch.resume_run`` through the app's launcher."""
        from .. import launch

        return launch.resume_run(campaign, rid, starter=self._start_process, **kw)

    def tick(self) -> None:
        series = self.series
        if series is None or self.busy:
            return
        self.busy = True
        self.app.run_worker(
            lambda: self._poll(series),
            thread=True,
            group="series",
            exit_on_error=False,
            description="series: reap and start runs",
        )

    def _poll(self, series: sr.Series) -> None:
        """In a worker thread: one poll; the result goes back as a message."""
        from .. import runs

        changes: list[tuple[str, sr.Started]] = []
        error = ""
        try:
            changes = series.poll()
        except Exception as exc:  # noqa: BLE001 - shown; the runs already started keep running
            error = f"{type(exc).__name__}: {exc}"
            series.pending.clear()
        done = series.done
        if done:
            try:
                runs.settle(self.notebook_path)  # this app drove the series: it writes the rows of runs killed
            except Exception as exc:  # noqa: BLE001
                error = error or f"settle: {exc}"
        self.app.post_message(SeriesPolled(series, changes, done, error))

    def polled(self, message: SeriesPolled) -> bool:
        """On the UI thread: say what happened. True when the notebook should be read again."""
        self.busy = False
        if message.series is not self.series:
            return False
        if message.error:
            self.app.notify(f"{message.error}\nno further run is started", title="series", severity="error", timeout=20)
        for what, s in message.changes:
            if what == "started":
                self.started.append(s.run_id)
                self.app.notify(f"{s.run_id} started: {s.item.label()}", title="series")
            else:
                st = s.state
                bad = st is not None and st.status != "completed"
                self.app.notify(
                    f"{s.run_id} {st.status if st else '?'}: {st.stop_reason if st else ''}",
                    title="series",
                    severity="warning" if bad else "information",
                    timeout=10 if bad else 5,
                )
        if message.done:
            if self._timer is not None:
                self._timer.stop()
                self._timer = None
            self.app.notify(f"series finished: {self.status()}; C compares the variants", title="series")
        return bool(message.changes or message.done or message.error)

    # ---- stopping

    def stop(self) -> None:
        """Drop the waiting runs and stop the running ones (SIGTERM, then SIGKILL), in a worker; a series on Ray:
        its command ended, and each run its keeper holds stopped through it (``cockpit stop``)."""
        series, remote = self.series, self.remote

        def work() -> None:
            said = series.stop() if series is not None else []
            if remote is not None:
                said += _stop_on_ray(self.notebook_path, remote)
            self.app.post_message(SeriesStopped(said))

        self.app.run_worker(work, thread=True, group="series-stop", exit_on_error=False, description="stop the series")


def _stop_on_ray(notebook_path: Path, remote: RaySeries) -> list[str]:
    """End the background ``cockpit series --ray`` (its runs outlive it) and stop each run a keeper still holds."""
    import os
    import signal

    from .. import cluster, launch

    said = []
    if remote.alive:
        try:
            os.killpg(remote.proc.pid, signal.SIGTERM)  # its own session: start_new_session
        except ProcessLookupError:
            pass
        remote.proc.wait(timeout=30)
        said.append(f"the series command (pid {remote.proc.pid}) ended: no further run is started")
    held = cluster.held_runs(notebook_path)
    if held:  # each stop waits up to its SIGKILL: side by side, the last run stops as soon as the first
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(8, len(held))) as pool:
            said += [f"{r.name}: {out}" for r, out in zip(held, pool.map(launch.stop, held), strict=True)]
    return said
