"""Every message the TUI's parts send each other, in one module.

Screens and widgets import their messages from here, never from the app or
from another screen, so no screen module imports ``app.py`` (the app imports
the screens it pushes: one direction only). Workers end by posting one of
these (``post_message`` is thread-safe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.message import Message

if TYPE_CHECKING:
    from .. import runs
    from ..schema import Event, InspectDoc
    from ..series import Series, Started
    from .comparedata import Comparison, Curve
    from .device import DeviceSnapshot, MachineFacts
    from .ingest import RunFeed
    from .notebookread import NotebookReading


class NotebookChanged(Message):
    """The notebook was reloaded (our own save or someone else's change)."""

    def __init__(self, external: bool) -> None:
        super().__init__()
        self.external = external


class NotebookRead(Message):
    """campaign.toml was read in a worker: the notebook, or why it cannot be read."""

    def __init__(self, read: NotebookReading, external: bool) -> None:
        super().__init__()
        self.read = read
        self.external = external


class RunStates(Message):
    """The campaign's run folders, read in a worker: run id -> state, and the runs whose process lives."""

    def __init__(
        self,
        states: dict[str, runs.RunState],
        live: list[str],
        meta: dict[str, tuple[str, int, str]],
        final: bool = True,
    ) -> None:
        super().__init__()
        self.final = final  # False: a batch of a reading still under way (``live`` is then empty)
        self.states = states
        self.live = live
        self.meta = meta  # run id -> (variant, seed, kind) from its run.toml (a run without a notebook row)


class Compared(Message):
    """The comparison and the curves, read in a worker (or why they could not be)."""

    def __init__(
        self,
        data: Comparison | None,
        curves: list[Curve],
        error: str = "",
        tables: tuple[int, Text] | None = None,
    ) -> None:
        super().__init__()
        self.data = data
        self.curves = curves
        self.error = error
        self.tables = tables  # (width, the tables laid out at that width), when the worker laid them out


class StopDone(Message):
    """A run was asked to stop; ``text`` says what happened."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class PilotStarted(Message):
    """A pilot asked for from the TUI passed the pre-start checks and started (``run_id``), or was refused
    (``error``: the checks' words, the same as ``cockpit pilot`` prints)."""

    def __init__(self, variant: str, seed: int, run_id: str = "", error: str = "") -> None:
        super().__init__()
        self.variant, self.seed, self.run_id, self.error = variant, seed, run_id, error


class Reading(Message):
    """One NVML reading."""

    def __init__(self, snapshot: DeviceSnapshot, machine: MachineFacts | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.machine = machine


class SeriesPolled(Message):
    """One poll of the series driven from the TUI: what started and finished, and whether it is done."""

    def __init__(self, series: Series, changes: list[tuple[str, Started]], done: bool, error: str) -> None:
        super().__init__()
        self.series = series
        self.changes = changes
        self.done = done
        self.error = error


class SeriesStopped(Message):
    """The series was stopped; ``said`` is one line per run that was running."""

    def __init__(self, said: list[str]) -> None:
        super().__init__()
        self.said = said


class FeedLoaded(Message):
    """A run's history was read in a worker; from now on its reader belongs to the UI thread."""

    def __init__(self, run_id: str, feed: RunFeed) -> None:
        super().__init__()
        self.run_id = run_id
        self.feed = feed


class FeedsChanged(Message):
    """New events were read: run id -> the aspects that changed ("all" for a reader just loaded)."""

    def __init__(self, changed: dict[str, set[str]]) -> None:
        super().__init__()
        self.changed = changed

    def can_replace(self, message: Message) -> bool:
        # Queued and not handled yet (a busy screen): merge, so the queue never grows.
        if isinstance(message, FeedsChanged):
            for rid, aspects in message.changed.items():
                self.changed.setdefault(rid, set()).update(aspects)
            return True
        return False


class CurvesRead(Message):
    """Curves of chosen runs read in a worker: run id -> (updates, losses, validation points)."""

    def __init__(self, curves: dict[str, tuple[list[float], list[float], list[tuple[float, float]]]]) -> None:
        super().__init__()
        self.curves = curves


class DataRead(Message):
    """A run's inspected examples read in a worker (or why they cannot be shown)."""

    def __init__(self, doc: InspectDoc | None, why: str, source: str, gate: Event | None, run_id: str = "") -> None:
        super().__init__()
        self.run_id = run_id  # the run whose inspect.json it is
        self.doc = doc
        self.why = why
        self.source = source  # the run whose inspect.json is shown (a series run shows its variant's pilot)
        self.gate = gate
