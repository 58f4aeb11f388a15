"""The Cockpit application: holds the campaign, the launcher and the device source.

Thin on purpose: screens own their behaviour. The app keeps the notebook as
last read (``notebookread``: a file that cannot be read is shown, never
fatal; a huge one is painted before it is parsed), watches ``campaign.toml``
for changes made by someone else (the CLI), keeps one reader per followed
run (``feeds.Feeds``) and a cache of finished runs (``runcache.RunCache``)
for every screen, and offers the actions the footer, the screens and the
command palette share. A series started here is driven by
``seriesctl.SeriesDriver``. Notifications are never markup, and wait while a
dialog is open (``toasts.ToastApp``). Runs started here are detached and
outlive the app (``processes``: the launcher, and what is said on quitting).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import App
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.worker import Worker, WorkerState

from .. import notebook as nbm
from .. import runs
from . import notebookread as nr
from .api import Cockpit, Intervals, Launcher
from .device import DeviceSource, NvmlSource
from .editing import EditingApp
from .feeds import ALL, Feeds
from .messages import (
    FeedLoaded,
    FeedsChanged,
    NotebookChanged,
    NotebookRead,
    PilotStarted,
    SeriesPolled,
    SeriesStopped,
)
from .plain import clean_line
from .processes import ProcessLauncher, still_running
from .runcache import RunCache
from .seriesctl import SeriesDriver

if TYPE_CHECKING:
    from textual.command import Provider

__all__ = ["CockpitApp", "Launcher", "ProcessLauncher", "Intervals", "main"]


def _commands() -> type[Provider]:
    # The palette's module imports textual.command: only when ctrl+p is pressed.
    from .commands import CockpitCommands

    return CockpitCommands


BUSY_LINES = 50  # events a reading found that make the next come a tick later, not quiet_s later


class CockpitApp(EditingApp):
    CSS_PATH = Path(__file__).parent / "cockpit.tcss"  # absolute: subclasses elsewhere keep it
    TITLE = "Cockpit"
    COMMANDS = App.COMMANDS | {_commands}
    BINDINGS = [
        Binding("question_mark", "help", "Help", id="help", key_display="?"),
        Binding("q", "quit", "Quit", id="quit"),
        Binding("m", "toggle_maximize", "Max", id="maximize", show=False),
        Binding("ctrl+g", "device", "GPUs", id="device", show=False),
    ]

    def __init__(
        self,
        campaign: Path | str,
        *,
        device_source: DeviceSource | None = None,
        launcher: Launcher | None = None,
        timing: Intervals | None = None,
        watch: bool = True,
        sync_bytes: int = nr.SYNC_BYTES,
    ) -> None:
        super().__init__()
        self.notebook_path = nr.notebook_path(campaign)
        self.campaign_dir = self.notebook_path.parent
        self.device_source: DeviceSource = device_source or NvmlSource()
        self.launcher: Launcher = launcher or ProcessLauncher()
        self.timing = timing or Intervals()
        self.watch_notebook = watch
        self.notebook: nbm.Notebook = nr.placeholder(self.notebook_path)
        self.notebook_error = ""  # why the file cannot be read now ("" when it can)
        self.notebook_partial = False  # a preview of a huge file: the decisions are being read
        self.notebook_decisions: int | None = None  # how many decisions a preview stands for
        self._stat: tuple[int, int] | None = None
        self._first_read(sync_bytes)
        self.sub_title = clean_line(self.notebook.campaign.name, 60)
        self.cache = RunCache()
        self.feeds = Feeds(self.campaign_dir, self._feed_worker, self.post_message)
        self.series = SeriesDriver(self, self.notebook_path, self.launcher.start, self.timing.series_s)
        self.quit_summary = ""  # what keeps running, printed after the app exits
        self._poll_due = 0.0  # when the runs' events are next read (time.monotonic; the timer ticks every events_s)

    # ---- the notebook on disk

    def _first_read(self, sync_bytes: int) -> None:
        """Before the first frame: a small file whole, a huge one as a preview (the rest in a worker)."""
        self._stat = self._stat_now()
        size = nr.size(self.notebook_path)
        got = nr.preview(self.notebook_path) if size is not None and size > sync_bytes else nr.read(self.notebook_path)
        self._take(got)

    def _take(self, got: nr.NotebookReading) -> None:
        if got.notebook is not None:
            self.notebook = got.notebook
            self.notebook_error = ""
        else:
            self.notebook_error = got.error
        self.notebook_partial = got.partial
        self.notebook_decisions = got.decisions

    @property
    def editable(self) -> bool:
        """Whether the notebook was read whole and can be the base of an edit."""
        return not self.notebook_error and not self.notebook_partial

    def on_mount(self) -> None:
        from .screens.campaign import CampaignScreen

        self.push_screen(CampaignScreen())
        if self.notebook_partial:
            self.call_after_refresh(self.reload_notebook)  # the whole file, once the preview is on screen
        if self.watch_notebook:
            self.set_interval(self.timing.notebook_s, self._check_notebook)
        self.set_interval(self.timing.events_s, self._poll_feeds)

    def _stat_now(self) -> tuple[int, int] | None:
        try:
            st = self.notebook_path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _check_notebook(self) -> None:
        if self.series.busy:
            return  # our own series is writing run rows: reloaded when its poll returns
        stat = self._stat_now()
        if stat == self._stat:
            return
        self._stat = stat
        self.reload_notebook(external=True)

    def reload_notebook(self, external: bool = False) -> None:
        """Read campaign.toml again in a worker; NotebookRead brings the result back."""
        path, seen = self.notebook_path, self.notebook.digest

        def work() -> None:
            if external and seen is not None:
                try:
                    if hashlib.sha256(path.read_bytes()).hexdigest() == seen:
                        return  # touched, not changed
                except (OSError, RecursionError):
                    pass
            self.post_message(NotebookRead(nr.read(path), external))

        self.run_worker(work, thread=True, group="notebook", exclusive=True, description="read campaign.toml")

    @on(NotebookRead)
    def notebook_read(self, message: NotebookRead) -> None:
        got = message.read
        if got.notebook is None:
            if got.error != self.notebook_error:
                self.notify(got.error, title="campaign.toml cannot be read", severity="error", timeout=15)
            self.notebook_error = got.error
            self._broadcast(lambda: NotebookChanged(message.external))
            return
        before, was_ok = self.notebook, self.editable
        self._take(got)
        self._stat = self._stat_now()
        self.sub_title = clean_line(self.notebook.campaign.name, 60)
        if message.external and was_ok:
            changed = nr.human_changes(before, self.notebook)
            if changed:  # a run writing its own row is not news; a person's (or the CLI's) edit is
                self.notify(
                    f"campaign.toml changed on disk ({', '.join(changed[:6])}): the view is reloaded.",
                    title="notebook changed",
                    severity="warning",
                )
        self._broadcast(lambda: NotebookChanged(message.external))

    def _broadcast(self, make: Callable[[], NotebookChanged]) -> None:
        """Every screen in the stack gets the news (the one on top first), each its own message."""
        if not self.screen_stack:
            return  # a read that lands while the app starts or closes: no screen to tell, no keys to offer
        self.refresh_bindings()  # the keys on offer follow whether the notebook can be read (editing.EditingApp)
        for screen in reversed(self.screen_stack):
            screen.post_message(make())

    # ---- the runs' readers, shared by the screens

    def _feed_worker(self, work: Callable[[], None], description: str) -> object:
        return self.run_worker(work, thread=True, group="feeds", exit_on_error=False, description=description)

    @on(FeedLoaded)
    def feed_loaded(self, message: FeedLoaded) -> None:
        self.feeds.loaded(message)
        self._tell_feeds({message.run_id: {ALL}})

    def _poll_feeds(self) -> None:
        """Read the runs' new events: every tick while a run's own screen shows them pouring in, less often
        while they trickle (a pilot's 20 samples a second) or while only the overview is in view."""
        now = time.monotonic()
        if now < self._poll_due:
            return
        keep = {rid for s in self.screen_stack if isinstance(rid := getattr(s, "run_id", None), str)}
        changed = self.feeds.poll(keep)
        if changed:
            self._tell_feeds(changed)
        timing = self.timing
        if not self._shows_a_live_run():
            every = timing.overview_s
        elif self.feeds.behind or self.feeds.last_lines >= BUSY_LINES:
            every = timing.events_s
        else:
            every = timing.quiet_s
        self._poll_due = now + max(every, timing.events_s) - timing.events_s / 2  # half a tick: timers jitter

    def _shows_a_live_run(self) -> bool:
        """Whether the screen in view (under any dialog) follows one run live: its memory, gates and log."""
        for screen in reversed(self.screen_stack):
            if not isinstance(screen, ModalScreen):
                return bool(getattr(screen, "follows_live", False))
        return False

    def _tell_feeds(self, changed: dict[str, set[str]]) -> None:
        """Each screen hears of the runs it follows (``wants_feed``), and of nothing else."""
        for screen in reversed(self.screen_stack):
            wants = getattr(screen, "wants_feed", None)
            if wants is None:
                continue
            mine = {rid: set(aspects) for rid, aspects in changed.items() if wants(rid)}
            if mine:
                screen.post_message(FeedsChanged(mine))

    # ---- a worker's unexpected error (notifications themselves: toasts.ToastApp)

    @on(Worker.StateChanged)
    def worker_failed(self, event: Worker.StateChanged) -> None:
        """The one place a worker's unexpected error is shown (the app goes on)."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            err = event.worker.error
            self.notify(
                f"{event.worker.description or event.worker.name}: {type(err).__name__}: {err}",
                title="error",
                severity="error",
                timeout=15,
            )

    # ---- actions shared by footer, screens and command palette

    def action_help(self) -> None:
        from .screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(getattr(self.screen, "HELP_SECTION", "")))

    def action_toggle_maximize(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
        elif screen.focused is None or not screen.maximize(screen.focused):
            self.notify("nothing here to maximise: Tab moves to a pane first", severity="warning", timeout=3)

    def action_device(self) -> None:
        from .screens.device import DeviceScreen

        if not isinstance(self.screen, DeviceScreen):
            self.push_screen(DeviceScreen())

    def run_kind(self, run_id: str) -> str:
        """ "pilot" or "train": the notebook row says, else the run's frozen run.toml."""
        for row in self.notebook.runs:
            if row.id == run_id:
                return row.kind
        try:
            return str(runs.read_run_toml(runs.run_dir(self.campaign_dir, run_id))["run"].get("kind", "pilot"))
        except (OSError, KeyError, ValueError, AttributeError):
            return "pilot"

    def open_run(self, run_id: str) -> None:
        self._poll_due = 0.0  # its events at the next tick, not at the overview's next reading
        if self.run_kind(run_id) == "train":
            from .screens.train import TrainRunScreen

            self.push_screen(TrainRunScreen(run_id))
            return
        from .screens.run import RunScreen

        self.push_screen(RunScreen(run_id))

    def action_compare(self, view: str = "tables") -> None:
        from .screens.compare import CompareScreen

        if isinstance(self.screen, CompareScreen):
            self.screen.action_view(view)
        elif self.need_notebook("compare"):
            self.push_screen(CompareScreen(view))

    def open_data(self, run_id: str) -> None:
        from .screens.data import DataScreen

        self.push_screen(DataScreen(run_id))

    def action_start_pilot(self) -> None:
        from .screens.dialogs import StartPilotScreen

        if not self.need_notebook("start a pilot"):
            return
        if self.notebook.is_probe:
            try:
                self.notebook.needs_task("a pilot")
            except nbm.NotebookError as exc:
                self.notify(str(exc), title="no task to pilot", severity="warning", timeout=15)
            return

        def chosen(choice: tuple[str, int] | None) -> None:
            if choice is not None:
                self.start_pilot(*choice)

        self.push_screen(StartPilotScreen([v.id for v in self.notebook.variants], self.notebook.reference.id), chosen)

    def start_pilot(self, variant: str, seed: int) -> None:
        """Start a pilot through the CLI's pre-start checks (the launcher's ``check``, which is
        :func:`cockpit.prestart.before_pilot`: the task imports, its splits size, its model builds, one batch
        collates), in a worker: a problem is refused before a run exists, in the words ``cockpit pilot`` prints."""
        path, launcher = self.notebook_path, self.launcher

        def work() -> None:
            from .. import launch
            from ..errors import CockpitError

            try:
                launcher.check(path, variant)
                rid, _ = launch.new_run(path, variant, seed, kind="pilot", starter=launcher.start)
            except (CockpitError, OSError) as exc:
                self.post_message(PilotStarted(variant, seed, error=str(exc)))
                return
            self.post_message(PilotStarted(variant, seed, run_id=rid))

        self.notify(
            f"checking the task before the pilot of {variant} starts (imports it, builds the model, makes one batch)",
            title="pilot",
        )
        self.run_worker(
            work, thread=True, group="pilot-start", exit_on_error=False, description="check the task, start a pilot"
        )

    @on(PilotStarted)
    def pilot_started(self, message: PilotStarted) -> None:
        if message.error:
            self.notify(message.error, title="pilot not started", severity="error", timeout=20)
            return
        self.reload_notebook()
        self.notify(f"pilot {message.run_id} started ({message.variant}, seed {message.seed})", title="pilot")
        self.open_run(message.run_id)

    # ---- a series of train runs (variants x seeds), driven from here (seriesctl.SeriesDriver)

    def action_start_series(self) -> None:
        from .. import series as sr
        from .screens.seriesdialog import StartSeriesScreen
        from .seriesctl import SeriesChoice

        if self.series.running:
            self.notify(
                f"a series is running: {self.series.status()}; stop it first (palette: Stop the series)",
                severity="warning",
            )
            return
        if not self.need_notebook("start a series"):
            return

        def chosen(choice: SeriesChoice | None) -> None:
            if choice is not None:
                self.series.start(choice)

        nb = self.notebook
        self.push_screen(StartSeriesScreen(nb, sr.default_variants(nb)), chosen)

    @on(SeriesPolled)
    def series_polled(self, message: SeriesPolled) -> None:
        if self.series.polled(message):
            self.reload_notebook()

    def action_resume_runs(self) -> None:
        """Go on with the stopped and crashed training runs from their newest checkpoints."""
        if self.series.running:
            self.notify(
                f"a series is running: {self.series.status()}; resume once it ends or is stopped",
                severity="warning",
            )
            return
        if self.need_notebook("resume runs"):
            self.series.resume()

    def action_stop_series(self) -> None:
        from .screens.dialogs import ConfirmScreen

        s, remote = self.series.series, self.series.remote

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.series.stop()

        if remote is not None and (remote.alive or s is None):
            from .. import cluster

            held = [r.name for r in cluster.held_runs(self.notebook_path)]
            text = (
                f"Stop the series on the Ray cluster at {remote.address}?\nIts command ends (no further run is "
                f"started); {', '.join(held) or 'no run'} on the cluster get SIGTERM, then SIGKILL after 10 s."
            )
            self.push_screen(ConfirmScreen(text), confirmed)
            return
        if s is None or s.done:
            self.notify("no series is running", severity="warning")
            return
        self.push_screen(
            ConfirmScreen(
                f"Stop the series?\n{len(s.pending)} runs not started are dropped; "
                f"{', '.join(x.run_id for x in s.active) or 'no run'} get SIGTERM, then SIGKILL after 10 s."
            ),
            confirmed,
        )

    @on(SeriesStopped)
    def series_stopped(self, message: SeriesStopped) -> None:
        self.notify("\n".join(message.said) or "nothing was running", title="series stopped")

    # ---- quitting: what keeps running is said

    async def action_quit(self) -> None:
        from .screens.dialogs import ConfirmScreen

        s = self.series.series
        if s is None or not s.pending:
            self._quit()
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._quit()

        self.push_screen(
            ConfirmScreen(
                f"Quit with {len(s.pending)} series runs not started?\nThey will not start; the runs already running "
                f"({', '.join(x.run_id for x in s.active) or 'none'}) keep running."
            ),
            confirmed,
        )

    def _quit(self) -> None:
        self.quit_summary = still_running(self.campaign_dir, self.notebook)
        self.exit()


def main(campaign: Path | str, headless: bool = False) -> int:
    """Run the TUI; afterwards say what keeps running. Non-zero when the app ended on an unhandled error."""
    import sys

    app = CockpitApp(campaign)
    app.run(headless=headless)
    summary = getattr(app, "quit_summary", "")  # absent when the app never got as far as mounting
    if summary:
        print(summary)
    code = int(app.return_code or 0)
    if code:  # Textual printed the error above; never report success after it
        print(
            "cockpit: the TUI ended after an unexpected error (above); runs it started keep running. "
            "Open it again with `cockpit`.",
            file=sys.stderr,
        )
    return code


def _is_cockpit(app: CockpitApp) -> Cockpit:
    """Never called: mypy checks here that the application offers everything screens ask of it."""
    return app
