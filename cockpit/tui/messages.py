"""Every message the TUI's parts send each other, in one module.

Screens and widgets import their messages from here, never from the app or
from another screen, so no screen module imports ``app.py`` (the app imports
the screens it pushes: one direction only). Workers end by posting one of
these (``post_message`` is thread-safe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from .. import runs
    from ..series import Series, Started
    from .comparison import Curve
    from .device import DeviceSnapshot


class NotebookChanged(Message):
    """The notebook was reloaded (our own save or someone else's change)."""

    def __init__(self, external: bool) -> None:
        super().__init__()
        self.external = external


class RunStates(Message):
    """The campaign's run folders, read in a worker: run id -> state."""

    def __init__(self, states: dict[str, runs.RunState]) -> None:
        super().__init__()
        self.states = states


class Compared(Message):
    """The comparison and the curves, read in a worker (or why they could not be)."""

    def __init__(self, data: dict[str, Any] | None, curves: list[Curve], error: str = "") -> None:
        super().__init__()
        self.data = data
        self.curves = curves
        self.error = error


class StopDone(Message):
    """A run was asked to stop; ``text`` says what happened."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class Reading(Message):
    """One NVML reading."""

    def __init__(self, snapshot: DeviceSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


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
