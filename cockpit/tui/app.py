"""The Cockpit application: holds the campaign, the launcher and the device source.

Thin on purpose: screens own their behaviour. The app keeps the notebook as
last read, watches ``campaign.toml`` for changes made by someone else (the
CLI, a pilot) and offers the actions the footer, the screens and the command
palette share. A series started here is driven by ``seriesctl.SeriesDriver``: a timer
hands ``Series.poll`` to a worker thread, which starts the next runs detached
and reaps the finished ones, so the UI never waits on a run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import App
from textual.binding import Binding

from .. import notebook as nbm
from .api import Cockpit, Launcher, Timing
from .device import DeviceSource, NvmlSource
from .messages import NotebookChanged, SeriesPolled, SeriesStopped
from .notes import Saved
from .seriesctl import SeriesDriver

__all__ = ["CockpitApp", "Launcher", "ProcessLauncher", "Timing"]


class ProcessLauncher:
    """Starts and stops real pilots and series runs, detached (cockpit.launch)."""

    def start(self, rdir: Path, nproc: int = 1, env: dict[str, str] | None = None) -> int:
        from .. import launch

        return launch.start(rdir, nproc=nproc, env=env)

    def stop(self, rdir: Path) -> str:
        from .. import launch

        return launch.stop(rdir)


def _commands() -> type:
    # The palette's module imports textual.command: only when ctrl+p is pressed.
    from .commands import CockpitCommands

    return CockpitCommands


class CockpitApp(App[None]):
    CSS_PATH = Path(__file__).parent / "cockpit.tcss"  # absolute: subclasses elsewhere keep it
    TITLE = "Cockpit"
    COMMANDS = App.COMMANDS | {_commands}
    BINDINGS = [
        Binding("question_mark", "help", "Help", id="help", key_display="?"),
        Binding("q", "quit", "Quit", id="quit"),
        Binding("ctrl+g", "device", "GPUs", id="device", show=False),
    ]

    def __init__(
        self,
        campaign: Path | str,
        *,
        device_source: DeviceSource | None = None,
        launcher: Launcher | None = None,
        timing: Timing | None = None,
        watch: bool = True,
    ) -> None:
        super().__init__()
        self.notebook_path = nbm.find(campaign)
        self.notebook = nbm.load(self.notebook_path)
        self.campaign_dir = self.notebook_path.parent
        self.device_source: DeviceSource = device_source or NvmlSource()
        self.launcher: Launcher = launcher or ProcessLauncher()
        self.timing = timing or Timing()
        self.watch_notebook = watch
        self.sub_title = self.notebook.campaign.name
        self._stat: tuple[int, int] | None = None
        self.series = SeriesDriver(self, self.notebook_path, self.launcher.start, self.timing.series_s)

    def on_mount(self) -> None:
        from .screens.campaign import CampaignScreen

        self._stat = self._stat_now()
        self.push_screen(CampaignScreen())
        if self.watch_notebook:
            self.set_interval(self.timing.notebook_s, self._check_notebook)

    # ---- the notebook on disk

    def _stat_now(self) -> tuple[int, int] | None:
        try:
            st = self.notebook_path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def _check_notebook(self) -> None:
        if self.series.busy:
            return  # our own series is writing run rows: reloaded when its poll returns
        stat = self._stat_now()
        if stat == self._stat:
            return
        self._stat = stat
        try:
            digest = hashlib.sha256(self.notebook_path.read_bytes()).hexdigest()
        except FileNotFoundError:
            return
        if digest != self.notebook.digest:
            self.reload_notebook(external=True)

    def reload_notebook(self, external: bool = False) -> None:
        try:
            self.notebook = nbm.load(self.notebook_path)
        except nbm.NotebookError as exc:
            self.notify(str(exc), title="campaign.toml cannot be read", severity="error", timeout=15)
            return
        self._stat = self._stat_now()
        if external:
            self.notify(
                "campaign.toml changed on disk (CLI or pilot): the view is reloaded.",
                title="notebook changed",
                severity="warning",
            )
        self.screen.post_message(NotebookChanged(external))
        for screen in self.screen_stack:
            if screen is not self.screen:
                screen.post_message(NotebookChanged(external))

    # ---- actions shared by footer, screens and command palette

    def action_help(self) -> None:
        from .screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_device(self) -> None:
        from .screens.device import DeviceScreen

        if not isinstance(self.screen, DeviceScreen):
            self.push_screen(DeviceScreen())

    def run_kind(self, run_id: str) -> str:
        """ "pilot" or "train": the notebook row says, else the run's frozen run.toml."""
        from .. import runs

        for row in self.notebook.runs:
            if row.id == run_id:
                return row.kind
        try:
            return str(runs.read_run_toml(runs.run_dir(self.campaign_dir, run_id))["run"].get("kind", "pilot"))
        except (OSError, KeyError, ValueError):
            return "pilot"

    def open_run(self, run_id: str) -> None:
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
        else:
            self.push_screen(CompareScreen(view))

    def open_data(self, run_id: str) -> None:
        from .screens.data import DataScreen

        self.push_screen(DataScreen(run_id))

    def action_start_pilot(self) -> None:
        from .screens.dialogs import StartPilotScreen

        def chosen(choice: tuple[str, int] | None) -> None:
            if choice is not None:
                self.start_pilot(*choice)

        self.push_screen(StartPilotScreen([v.id for v in self.notebook.variants], self.notebook.reference.id), chosen)

    def start_pilot(self, variant: str, seed: int) -> None:
        from .. import launch
        from ..errors import CockpitError

        try:
            rid, rdir = launch.new_run(self.notebook_path, variant, seed, kind="pilot", starter=self.launcher.start)
        except (CockpitError, OSError) as exc:
            self.notify(str(exc), title="pilot not started", severity="error", timeout=15, markup=False)
            return
        self.reload_notebook()
        self.notify(f"pilot {rid} started ({variant}, seed {seed})", title="pilot", markup=False)
        self.open_run(rid)

    # ---- a series of train runs (variants x seeds), driven from here (seriesctl.SeriesDriver)

    def action_start_series(self) -> None:
        from .. import series as sr
        from .screens.dialogs import StartSeriesScreen

        if self.series.running:
            self.notify(
                f"a series is running: {self.series.status()}; stop it first (palette: Stop the series)",
                severity="warning",
            )
            return

        def chosen(choice: tuple[list[str], list[int], int, int | None] | None) -> None:
            if choice is not None:
                self.series.start(*choice)

        nb = self.notebook
        self.push_screen(StartSeriesScreen(nb, sr.default_variants(nb)), chosen)

    @on(SeriesPolled)
    def series_polled(self, message: SeriesPolled) -> None:
        if self.series.polled(message):
            self.reload_notebook()

    def action_stop_series(self) -> None:
        from .screens.dialogs import ConfirmScreen

        s = self.series.series
        if s is None or s.done:
            self.notify("no series is running", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.series.stop()

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

    async def action_quit(self) -> None:
        from .screens.dialogs import ConfirmScreen

        s = self.series.series
        if s is None or not s.pending:
            self.exit()
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.exit()

        self.push_screen(
            ConfirmScreen(
                f"Quit with {len(s.pending)} series runs not started?\nThey will not start; the runs already running "
                f"({', '.join(x.run_id for x in s.active) or 'none'}) keep running."
            ),
            confirmed,
        )

    def action_note(self, kind: str = "decision", run_id: str = "") -> None:
        from . import notes
        from .screens.dialogs import NoteScreen

        digest = self.notebook.digest

        def done(result: tuple[str, list[str]] | None) -> None:
            if result is not None:
                self.save(lambda: notes.add_note(self.notebook_path, digest, kind, *result))

        self.push_screen(NoteScreen(kind, [run_id] if run_id else []), done)

    def action_conclusion(self) -> None:
        from . import notes
        from .screens.dialogs import ConclusionScreen

        seen = self.notebook.conclusion

        def done(result: tuple[str, str] | None) -> None:
            if result is not None:
                self.save(lambda: notes.set_conclusion(self.notebook_path, seen, *result))

        self.push_screen(ConclusionScreen(seen, [v.id for v in self.notebook.variants]), done)

    def action_selection(self) -> None:
        from . import notes
        from .screens.dialogs import SelectionScreen

        seen = self.notebook.selection

        def done(result: dict[str, str] | None) -> None:
            if result is not None:
                self.save(lambda: notes.set_selection(self.notebook_path, seen, notes.parse_selection(result)))

        self.push_screen(SelectionScreen(seen), done)

    def set_verdict(self, run_id: str) -> None:
        from . import notes
        from .screens.dialogs import VerdictScreen

        try:
            seen = self.notebook.run(run_id).verdict
        except nbm.NotebookError as exc:
            self.notify(str(exc), severity="error")
            return

        def done(result: str | None) -> None:
            if result is not None:
                self.save(lambda: notes.set_verdict(self.notebook_path, run_id, seen, result))

        self.push_screen(VerdictScreen(run_id, seen), done)

    def save(self, edit: Callable[[], Saved]) -> bool:
        """Run one notebook edit; show what happened. A conflict is shown, never forced."""
        try:
            saved = edit()
        except nbm.ConflictError as exc:
            self.reload_notebook()
            self.notify(str(exc), title="not saved: changed on disk", severity="error", timeout=30)
            return False
        except nbm.NotebookError as exc:
            self.notify(str(exc), title="not saved", severity="error", timeout=20)
            return False
        self.reload_notebook()
        self.notify(saved.message, title="saved", severity="warning" if saved.merged else "information")
        return True


def _is_cockpit(app: CockpitApp) -> Cockpit:
    """Never called: mypy checks here that the application offers everything screens ask of it."""
    return app
