"""The Cockpit application: holds the campaign, the launcher and the device source.

Thin on purpose: screens own their behaviour. The app keeps the notebook as
last read, watches ``campaign.toml`` for changes made by someone else (the
CLI, a pilot) and offers the actions the footer, the screens and the command
palette share.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from textual.app import App
from textual.binding import Binding
from textual.message import Message

from .. import notebook as nbm
from .device import DeviceSource, NvmlSource


class Launcher(Protocol):
    def start(self, rdir: Path) -> int: ...
    def stop(self, rdir: Path) -> str: ...


class ProcessLauncher:
    """Starts and stops real pilots, detached (cockpit.launch)."""

    def start(self, rdir: Path) -> int:
        from .. import launch

        return launch.start(rdir)

    def stop(self, rdir: Path) -> str:
        from .. import launch

        return launch.stop(rdir)


@dataclass(frozen=True)
class Timing:
    """How often things are read. Tests shorten them; nothing here reads a clock."""

    events_s: float = 0.1  # drain new events, redraw what changed
    runs_s: float = 2.0  # re-derive run statuses from their folders
    notebook_s: float = 1.0  # has campaign.toml changed on disk?
    device_s: float = 1.0  # NVML reading


class NotebookChanged(Message):
    """The notebook was reloaded (our own save or someone else's change)."""

    def __init__(self, external: bool) -> None:
        super().__init__()
        self.external = external


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
        self.watch = watch
        self.sub_title = self.notebook.campaign.name
        self._stat: tuple[int, int] | None = None

    def on_mount(self) -> None:
        from .screens.campaign import CampaignScreen

        self._stat = self._stat_now()
        self.push_screen(CampaignScreen())
        if self.watch:
            self.set_interval(self.timing.notebook_s, self._check_notebook)

    # ---- the notebook on disk

    def _stat_now(self) -> tuple[int, int] | None:
        try:
            st = self.notebook_path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def _check_notebook(self) -> None:
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

    def open_run(self, run_id: str) -> None:
        from .screens.run import RunScreen

        self.push_screen(RunScreen(run_id))

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
        from .. import runs

        try:
            rid, rdir = runs.create_run(self.notebook_path, variant, seed, kind="pilot")
        except nbm.NotebookError as exc:
            self.notify(str(exc), title="pilot not created", severity="error", timeout=15)
            return
        try:
            pid = self.launcher.start(rdir)
        except OSError as exc:
            self.notify(f"{rdir}: the pilot did not start: {exc}", severity="error", timeout=15)
            return
        self.reload_notebook()
        self.notify(f"pilot {rid} started ({variant}, seed {seed}, pid {pid})", title="pilot")
        self.open_run(rid)

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

    def save(self, edit) -> bool:  # noqa: ANN001 - a zero-argument callable returning notes.Saved
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
