"""What the compare screen shows, read from the campaign's files. No textual, no torch.

The tables are ``cockpit compare``'s own: :func:`table_renderables` runs
:func:`cockpit.compare.render` against a collector in place of a console, so
the TUI shows the very tables, flags and method text the CLI prints, laid out
by Rich at the widget's width. The data is gathered like
:func:`cockpit.compare.collect` but read-only: ``collect`` reconciles the
notebook (a write), which the TUI leaves to its own edits and to the series it
drives, so opening the compare screen never rewrites ``campaign.toml``.

Curves: each train run's ``curve.csv`` (loss per update) and ``evals.csv``
(validation points), non-finite values left out (a diverged run's last loss may
be ``nan``; its stop reason says so). Each variant has a colour and each of its
runs a marker, so every overlaid run is told apart by colour and by marker;
the screen can also give each run a colour of its own.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.text import Text

from .. import compare, runs
from .. import events as ev
from .. import notebook as nbm

VARIANT_STYLES = (
    "bright_green",
    "bright_cyan",
    "bright_magenta",
    "yellow",
    "dodger_blue1",
    "orange1",
    "orchid",
    "white",
)
MARKERS = ("\u25cf", "\u25b2", "\u25a0", "\u25c6", "\u25bc", "\u25cb", "\u25b3", "\u25a1", "\u25c7")
RUN_STYLES = (
    "bright_green",
    "bright_cyan",
    "bright_magenta",
    "yellow",
    "dodger_blue1",
    "orange1",
    "orchid",
    "white",
    "spring_green1",
    "light_slate_blue",
    "gold1",
    "deep_pink2",
    "turquoise2",
    "tan",
)


def collect(nb: nbm.Notebook) -> dict[str, Any]:
    """The same dictionary as ``compare.collect``, without reconciling (no write)."""
    return compare.summarize(nb)


class Collector:
    """Stands in for a Rich console: keeps what ``compare.render`` prints, as renderables."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def print(self, *objects: Any, style: str | None = None, highlight: bool | None = None, **_: Any) -> None:
        for obj in objects:
            if isinstance(obj, str):
                text = Text.from_markup(obj)
                if style:
                    text.stylize(style)
                self.items.append(text)
            else:
                self.items.append(obj)


def table_renderables(data: dict[str, Any]) -> list[Any]:
    out = Collector()
    compare.render(data, out)
    return out.items


# --------------------------------------------------------------------------- curves


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

    def look(self, per_run: bool) -> str:
        return self.run_style if per_run and self.run_style else self.style

    def label(self) -> str:
        return f"{self.id} {self.variant} s{self.seed}"


def read_evals(path: Path) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                try:
                    step, loss = float(row.get("step") or "nan"), float(row.get("val_loss") or "nan")
                except ValueError:
                    continue
                if math.isfinite(step) and math.isfinite(loss):
                    out.append((step, loss))
    except (FileNotFoundError, OSError):
        pass
    return out


def styles(nb: nbm.Notebook, train: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Run id -> (colour, marker): a colour per variant (notebook order), a marker per run of that variant."""
    order = {v.id: i for i, v in enumerate(nb.variants)}
    extra: dict[str, int] = {}
    seen: dict[str, int] = {}
    out: dict[str, tuple[str, str]] = {}
    for r in train:
        vid = r["variant"]
        i = order.get(vid)
        if i is None:
            i = extra.setdefault(vid, len(order) + len(extra))
        n = seen.get(vid, 0)
        seen[vid] = n + 1
        out[r["id"]] = (VARIANT_STYLES[i % len(VARIANT_STYLES)], MARKERS[n % len(MARKERS)])
    return out


def curves(nb: nbm.Notebook, data: dict[str, Any]) -> list[Curve]:
    """Every train run's loss and validation curve, in run order, with its colour and marker."""
    train = data.get("train_runs") or []
    look = styles(nb, train)
    counted = {rid for g in data["quality"] for rid in g["runs"].values()}
    rows = compare.curves(nb.directory, [r["id"] for r in train])
    out: list[Curve] = []
    for r in train:
        style, marker = look[r["id"]]
        c = Curve(
            r["id"],
            r["variant"],
            int(r["seed"]),
            r["status"],
            r["stop_reason"],
            r["value"],
            style,
            marker,
            counted=r["id"] in counted,
            run_style=RUN_STYLES[len(out) % len(RUN_STYLES)],
        )
        for row in rows.get(r["id"], []):
            step, loss = row.get("step"), row.get("loss")
            if step is not None and loss is not None and math.isfinite(step) and math.isfinite(loss):
                c.steps.append(step)
                c.loss.append(loss)
        c.evals = read_evals(runs.run_dir(nb.directory, r["id"]) / runs.EVALS_FILE)
        out.append(c)
    return out


def default_selection(cs: list[Curve]) -> list[str]:
    """The runs the quality table counts, and every run that ended badly (a diverged run is shown, not hidden)."""
    bad = {
        ev.Status.DIVERGED.value,
        ev.Status.FAILED.value,
        ev.Status.OOM.value,
        ev.Status.ERROR.value,
        ev.Status.CRASHED.value,
    }
    return [c.id for c in cs if c.counted or c.status in bad or c.status == ev.Status.RUNNING.value]


def zoom_top(cs: list[Curve]) -> float | None:
    """A y scale for the runs that did not diverge (a diverged curve then runs off the top)."""
    tops = [max(c.loss) for c in cs if c.loss and c.status != ev.Status.DIVERGED.value]
    tops += [max(y for _, y in c.evals) for c in cs if c.evals and c.status != ev.Status.DIVERGED.value]
    return max(tops) if tops else None
