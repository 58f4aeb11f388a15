"""What screens, widgets and the palette may ask of the application, typed.

Screens never import ``app.py`` (the app imports them to push them, and an
import cycle would follow). They reach the running application through
:func:`cockpit`, which gives ``self.app`` the type :class:`Cockpit`: the
attributes and actions the application offers. ``app.py`` proves that
``CockpitApp`` has every one of them (mypy checks the assignment there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from .. import notebook as nbm
    from .device import DeviceSource
    from .feeds import Feeds
    from .notebookedits import Saved
    from .runcache import RunCache
    from .seriesctl import SeriesDriver


class Launcher(Protocol):
    """Checks, starts and stops runs detached (tests start a harmless process instead)."""

    def check(self, campaign: Path, variant: str) -> None: ...  # cockpit.prestart.before_pilot: raises a refusal
    def start(self, rdir: Path, nproc: int = 1, env: dict[str, str] | None = None, resume: bool = False) -> int: ...
    def stop(self, rdir: Path) -> str: ...


@dataclass(frozen=True)
class Intervals:
    """How often things are read. Tests shorten them; nothing here reads a clock."""

    events_s: float = 0.08  # drain new events, redraw what changed, while a run's own screen shows them coming fast
    quiet_s: float = 0.2  # the same while they come slowly (a few lines a reading; never faster than events_s)
    overview_s: float = 0.5  # the same while only the campaign's overview is in view (state and progress)
    runs_s: float = 2.0  # re-derive run statuses from their folders
    notebook_s: float = 1.0  # has campaign.toml changed on disk?
    device_s: float = 1.0  # NVML reading
    series_s: float = 1.0  # a running series: reap finished runs, start the next ones


class Cockpit(Protocol):
    """The application as screens see it."""

    notebook: nbm.Notebook
    notebook_path: Path
    campaign_dir: Path
    device_source: DeviceSource
    launcher: Launcher
    timing: Intervals
    series: SeriesDriver
    feeds: Feeds
    cache: RunCache
    notebook_error: str  # why campaign.toml cannot be read now ("" when it can)
    notebook_partial: bool  # a preview of a huge file, the rest being read
    notebook_decisions: int | None

    @property
    def editable(self) -> bool: ...

    def need_notebook(self, what: str) -> bool: ...
    def hidden(
        self, screen: Any
    ) -> bool: ...  # under an opaque screen: out of every frame (screenstack.ScreenStackApp)
    def saved(self, saved: Saved) -> None: ...
    def reload_notebook(self, external: bool = False) -> None: ...
    def run_kind(self, run_id: str) -> str: ...
    def open_run(self, run_id: str) -> None: ...
    def open_data(self, run_id: str) -> None: ...
    def set_verdict(self, run_id: str) -> None: ...
    def action_note(self, kind: str = "decision", run_id: str = "") -> None: ...
    def action_conclusion(self) -> None: ...
    def action_selection(self) -> None: ...
    def action_variant(self, variant_id: str = "") -> None: ...
    def action_start_pilot(self) -> None: ...
    def action_start_series(self) -> None: ...
    def action_stop_series(self) -> None: ...
    def action_resume_runs(self) -> None: ...
    def action_compare(self, view: str = "tables") -> None: ...
    def action_device(self) -> None: ...
    def action_help(self) -> None: ...


class HasApp(Protocol):
    """A widget, a screen or a palette provider: anything Textual gives an ``app``."""

    @property
    def app(self) -> Any: ...


def app_of(node: HasApp) -> Cockpit:
    """``node.app`` as the Cockpit application (the one place that casts it)."""
    return cast("Cockpit", node.app)
