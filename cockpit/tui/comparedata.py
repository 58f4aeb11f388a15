"""The compare screen's records: ``cockpit compare``'s figures as the TUI reads them, the train runs' curves, and a
comparison read in a worker. No textual, no torch; imported by the modules that build and lay them out, and by the
cache that keeps the last one read.

The figures are :func:`cockpit.compare.summarize`'s plain dictionary (what ``cockpit compare --json`` prints): its
keys and values are declared here, one record per part, and it enters the TUI as :class:`Comparison` in
:func:`cockpit.tui.comparison.collect`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from ..schema import JSONObject

if TYPE_CHECKING:
    from rich.text import Text


class SeedStats(TypedDict):
    """A variant's quality over its seeds (``compare.Stats``, with its spread)."""

    n: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    spread: float | None


class QualityRow(TypedDict):
    """One variant (and settings tag) of the quality table (``compare.Group``)."""

    variant: str
    tag: str
    kind: str
    reference: bool
    stats: SeedStats
    seeds: dict[int, float]  # seed -> value (the latest completed run of that seed)
    runs: dict[int, str]  # seed -> run id counted
    not_completed: dict[str, int]  # status -> runs whose seed has no completed run
    verdict: str
    sentence: str
    diff: float | None
    spread: float | None
    target: str
    target_reached: bool | None


class TrainRow(TypedDict):
    """One train run (``compare.TrainRun``)."""

    id: str
    variant: str
    seed: int
    status: str
    stop_reason: str
    follows: str
    value: float | None
    updates: int | None
    planned_updates: int | None
    step_time_s: float | None
    tag: str
    dir: str
    superseded_by: str


class PhaseMemRow(TypedDict):
    """One phase of a variant's latest passed pilot (``compare.PhaseMem``)."""

    phase: str
    peak: int | None
    peak_reserved: int | None
    counter: str
    duration_s: float | None


class PilotMemRow(TypedDict):
    """A variant's memory and time per phase (``compare.PilotMem``)."""

    variant: str
    run: str | None
    phases: dict[str, PhaseMemRow]
    peak: int | None
    counter: str
    step_time_s: float | None
    max_length: int | None
    truncation: JSONObject | None
    params_note: str
    step_min_s: float | None
    step_max_s: float | None
    step_n: int
    busy: str
    kind: str


class Comparison(TypedDict):
    """``compare.summarize``'s figures, as ``cockpit compare --json`` prints them, read by the compare screen."""

    campaign: str
    question: str
    metric: str
    higher_is_better: bool
    quality_target: float | None
    held_constant: str
    probe_campaign: bool
    reference: str
    quality: list[QualityRow]
    not_completed: list[TrainRow]
    superseded: list[TrainRow]
    memory: dict[str, PilotMemRow]
    flags: dict[str, list[dict[str, str]]]  # variant -> its flags (flag, detail)
    kinds: dict[str, str]
    method: str
    train_runs: list[TrainRow]


@dataclass
class Curve:
    id: str
    variant: str
    seed: int
    status: str
    stop_reason: str
    value: float | None  # the quality metric at the end (completed runs)
    style: str
    marker: str
    steps: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    evals: list[tuple[float, float]] = field(default_factory=list)  # (update, val_loss)
    counted: bool = False  # counted in the quality table (the latest completed run of its seed)
    run_style: str = ""  # a colour of its own, when runs rather than variants are coloured
    loaded: bool = False  # its curve.csv and evals.csv were read

    def look(self, per_run: bool) -> str:
        return self.run_style if per_run and self.run_style else self.style

    def label(self) -> str:
        return f"{self.id} {self.variant} s{self.seed}"


@dataclass
class ComparisonReading:
    """A comparison read in a worker: the figures, the train runs listed, the tables laid out at a width."""

    data: Comparison
    curves: list[Curve]
    width: int
    tables: Text  # comparetables.laid_out at ``width``
