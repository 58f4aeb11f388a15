"""The compare screen's records: ``cockpit compare``'s figures as the TUI reads them, the train runs' curves, and a
comparison read in a worker. No textual, no torch; imported by the modules that build and lay them out, and by the
cache that keeps the last one read.

The figures are :func:`cockpit.compare.summarize`'s record, :class:`cockpit.compare.Comparison` (what ``cockpit
compare --json`` prints), read here as compare declares it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..compare import Comparison

if TYPE_CHECKING:
    from rich.text import Text


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


__all__ = ["Comparison", "ComparisonReading", "Curve"]
