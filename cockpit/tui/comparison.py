"""What the compare screen shows, read from the campaign's files. No textual, no torch.

The figures are ``cockpit compare``'s, from the same function
(:func:`cockpit.compare.summarize`, which writes nothing), handed the run
folders as the app already holds them: from its cache (a finished run is read
once) and, for a running run, from its one incremental reader. Opening compare
on a campaign of a thousand runs reads only what changed.

``comparetables`` lays the figures out for the width at hand.

Curves: each chosen train run's ``curve.csv`` (loss per update) and
``evals.csv`` (validation points), non-finite values left out. Each variant has
a colour and each of its runs a marker; a variant with more than
``BAND_FROM`` chosen seeds is drawn as its mean with a min-max band. The
default choice is capped: the counted runs of at most ``MAX_VARIANTS``
variants (the reference, then the best), the running ones and a few that
ended badly.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from .. import compare, runs
from .. import events as ev
from .. import notebook as nbm
from ..compare.quality import TrainRunRow
from ..schema import Event
from .comparedata import Comparison, ComparisonReading, Curve
from .runcache import RunCache

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
MAX_VARIANTS = 6  # variants chosen by default on the curves
MAX_BAD = 6  # runs that ended badly chosen by default
BAND_FROM = 4  # a variant with this many chosen seeds or more is drawn as mean and min-max band
BAD = ev.BAD_ENDINGS  # the one set of runs that ended badly


# --------------------------------------------------------------------------- the figures


def all_runs(campaign_dir: Path, cache: RunCache, live: dict[str, runs.RunFiles] | None = None) -> list[runs.RunFiles]:
    """Every run of the campaign, oldest first: the live ones as given, the others from the cache."""
    live = live or {}
    out: list[runs.RunFiles] = []
    for p in runs.run_dirs(campaign_dir):
        r = live.get(p.name) or cache.read(p)
        if r is not None:
            out.append(r)
    return out


def read(
    nb: nbm.Notebook,
    cache: RunCache,
    snapshots: list[tuple[str, list[Event], runs.RunState]],
    width: int,
) -> ComparisonReading:
    """Everything the compare screen shows, read off the UI thread.

    ``snapshots``: the running runs as their readers hold them (id, events, state); the others
    come from the cache. Raises what reading raises: the caller shows it.
    """
    from . import comparetables
    from .runcache import build

    live = {}
    for rid, evs, st in snapshots:
        rdir = runs.run_dir(nb.directory, rid)
        try:
            frozen = runs.read_run_toml(rdir)
        except (OSError, ValueError):
            continue
        live[rid] = build(rdir, frozen, evs, runs.read_metrics(rdir) or None, st)
    data = collect(nb, cache, live)
    return ComparisonReading(
        data, listing(nb, data), width, comparetables.laid_out(comparetables.tables(data, width), width)
    )


def collect(
    nb: nbm.Notebook, cache: RunCache | None = None, live: dict[str, runs.RunFiles] | None = None
) -> Comparison:
    """``compare.summarize`` from cached runs (and the running runs' own readers)."""
    # compare's figures are a plain dict: they enter the TUI here, as the record they are
    return compare.summarize(nb, all_runs(nb.directory, cache or RunCache(), live))


# --------------------------------------------------------------------------- curves


def read_evals(path: Path) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            for row in csv.DictReader(fh):
                try:
                    step, loss = float(row.get("step") or "nan"), float(row.get("val_loss") or "nan")
                except (ValueError, TypeError):
                    continue
                if math.isfinite(step) and math.isfinite(loss):
                    out.append((step, loss))
    except (OSError, csv.Error):
        pass
    return out


def styles(nb: nbm.Notebook, train: list[TrainRunRow]) -> dict[str, tuple[str, str]]:
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


def listing(nb: nbm.Notebook, data: Comparison) -> list[Curve]:
    """Every train run in run order, with its colour and marker; no file read (curves come later)."""
    train = data.get("train_runs") or []
    look = styles(nb, train)
    counted = {rid for g in data["quality"] for rid in g["runs"].values()}
    out: list[Curve] = []
    for r in train:
        style, marker = look[r["id"]]
        out.append(
            Curve(
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
        )
    return out


def load(c: Curve, campaign_dir: Path) -> Curve:
    """Read one run's curve.csv and evals.csv into ``c`` (non-finite values left out)."""
    rdir = runs.run_dir(campaign_dir, c.id)
    steps: list[float] = []
    loss: list[float] = []
    for row in runs.read_csv_rows(rdir / runs.CURVE_FILE):
        step, value = row.get("step"), row.get("loss")
        if step is not None and value is not None and math.isfinite(step) and math.isfinite(value):
            steps.append(step)
            loss.append(value)
    c.steps, c.loss, c.evals, c.loaded = steps, loss, read_evals(rdir / runs.EVALS_FILE), True
    return c


def curves(nb: nbm.Notebook, data: Comparison) -> list[Curve]:
    """Every train run's loss and validation curve, in run order, with its colour and marker."""
    return [load(c, nb.directory) for c in listing(nb, data)]


def default_selection(cs: list[Curve], data: Comparison | None = None) -> list[str]:
    """The runs chosen on opening: capped so a campaign of hundreds of runs stays readable.

    The counted runs of at most ``MAX_VARIANTS`` variants (the reference first, then the
    best by mean), every running run, and up to ``MAX_BAD`` runs that ended badly (a
    diverged run is shown, not hidden).
    """
    order = _variant_order(cs, data)[:MAX_VARIANTS]
    chosen = [c.id for c in cs if c.variant in order and c.counted]
    chosen += [c.id for c in cs if c.status == ev.Status.RUNNING.value]
    bad = [c for c in cs if c.status in BAD]
    in_chosen = [c.id for c in bad if c.variant in order]  # bad runs of the variants shown come first
    chosen += (in_chosen + [c.id for c in bad if c.variant not in order])[:MAX_BAD]
    return list(dict.fromkeys(chosen))


def _variant_order(cs: list[Curve], data: Comparison | None) -> list[str]:
    variants = list(dict.fromkeys(c.variant for c in cs))
    if not data:
        return variants
    ref = data.get("reference")
    higher = bool(data.get("higher_is_better"))
    means = {g["variant"]: g["stats"]["mean"] for g in data.get("quality", []) if not g["tag"]}

    def key(v: str) -> tuple[int, float]:
        m = means.get(v)
        score = float("inf") if m is None else (-m if higher else m)
        return (0 if v == ref else 1, score)

    return sorted(variants, key=key)


def zoom_top(cs: list[Curve]) -> float | None:
    """A y scale for the runs that did not diverge (a diverged curve then runs off the top)."""
    tops = [max(c.loss) for c in cs if c.loss and c.status != ev.Status.DIVERGED.value]
    tops += [max(y for _, y in c.evals) for c in cs if c.evals and c.status != ev.Status.DIVERGED.value]
    return max(tops) if tops else None


def smooth(values: list[float], weight: float = 0.8) -> list[float]:
    """An exponential moving average, debiased at the start (TensorBoard's smoothing)."""
    out: list[float] = []
    last = 0.0
    for i, v in enumerate(values):
        last = weight * last + (1 - weight) * v
        out.append(last / (1 - weight ** (i + 1)))
    return out


@dataclass
class Band:
    """A variant's chosen runs as one curve: the mean loss per update with its min and max."""

    variant: str
    style: str
    runs: list[str]
    steps: list[float]
    mean: list[float]
    lo: list[float]
    hi: list[float]


def bands(shown: list[Curve]) -> tuple[list[Band], list[Curve]]:
    """Variants with ``BAND_FROM`` or more chosen runs that did not end badly become bands; the rest stay runs."""
    by_variant: dict[str, list[Curve]] = {}
    for c in shown:
        if c.status not in BAD:
            by_variant.setdefault(c.variant, []).append(c)
    out: list[Band] = []
    banded: set[str] = set()
    for vid, members in by_variant.items():
        if len(members) < BAND_FROM:
            continue
        at: dict[float, list[float]] = {}
        for c in members:
            for s, y in zip(c.steps, c.loss, strict=False):
                at.setdefault(s, []).append(y)
        steps = sorted(at)
        out.append(
            Band(
                vid,
                members[0].style,
                [c.id for c in members],
                steps,
                [sum(at[s]) / len(at[s]) for s in steps],
                [min(at[s]) for s in steps],
                [max(at[s]) for s in steps],
            )
        )
        banded |= {c.id for c in members}
    return out, [c for c in shown if c.id not in banded]
