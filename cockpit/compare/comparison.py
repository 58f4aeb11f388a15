"""The record ``cockpit compare`` builds: what it shows, what ``--json`` prints and what the TUI's compare screen
reads (its own module, so the renderer and the TUI read it without importing the package that builds it)."""

from __future__ import annotations

from typing import TypedDict

from .memory import Flag, PilotMemRow
from .quality import GroupRow, TrainRunRow


class Comparison(TypedDict):
    """Everything ``cockpit compare`` shows (and ``--json`` prints), as plain values; the TUI's compare screen
    reads the same."""

    campaign: str
    question: str
    metric: str
    higher_is_better: bool
    quality_target: float | None
    held_constant: str
    probe_campaign: bool
    reference: str
    quality: list[GroupRow]
    not_completed: list[TrainRunRow]
    superseded: list[TrainRunRow]
    memory: dict[str, PilotMemRow]
    flags: dict[str, list[Flag]]
    kinds: dict[str, str]
    method: str
    train_runs: list[TrainRunRow]
