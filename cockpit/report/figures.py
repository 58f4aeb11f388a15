"""The figures the report shows: per variant, every seed's final value, and the loss curves as text charts.

The results come from ``cockpit.compare`` so that the report and `cockpit
compare` never disagree. The charts are Unicode text on a character grid, so
the report needs no plotting library. No torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .. import notebook as nbm
from .. import runs
from .. import sheet as sh

MARKERS = "●▲■◆○△□◇"
BLOCKS = " ▏▎▍▌▋▊▉█"


# --------------------------------------------------------------------------- seeds


@dataclass
class VariantResult:
    """One variant at one set of settings, as `cockpit compare` groups it."""

    variant: str
    tag: str  # "" = the notebook's settings; else what differs (a quick look, --set ...)
    spread: sh.Spread | None
    runs: list[tuple[str, int, float]]  # run id, seed, value: the latest completed run per seed
    verdict: str  # reference | better | worse | not distinguishable | no reference | no data
    sentence: str
    target: str


@dataclass
class NotCounted:
    id: str
    variant: str
    seed: int
    status: str
    reason: str
    superseded_by: str = ""


def results(nb: nbm.Notebook) -> tuple[list[VariantResult], list[NotCounted]]:
    """Per variant and settings, every seed's final value and the verdict against the reference,
    computed by ``cockpit.compare`` so that the report and `cockpit compare` never disagree."""
    from ..compare import group_runs, train_runs

    trs = train_runs(nb)
    out = []
    for g in group_runs(nb, trs):
        kept = [(g.runs[k], k, g.seeds[k]) for k in sorted(g.seeds)]
        out.append(
            VariantResult(g.variant, g.tag, sh.spread([v for _, _, v in kept]), kept, g.verdict, g.sentence, g.target)
        )
    skipped = [
        NotCounted(r.id, r.variant, r.seed, r.status, r.stop_reason, r.superseded_by)
        for r in trs
        if (r.status not in ("completed", "running", "created"))
        or r.superseded_by
        or (r.status == "completed" and r.value is None)
    ]
    return out, skipped


# --------------------------------------------------------------------------- charts


def bar_chart(rows: list[tuple[str, float | None]], unit: str, width: int = 40) -> list[str]:
    """Horizontal bars with eighth-block resolution; absent values say so."""
    vals = [v for _, v in rows if v is not None]
    if not vals:
        return ["(nothing measured)"]
    top = max(vals) or 1.0
    lw = max(len(n) for n, _ in rows)
    out = []
    for name, v in rows:
        if v is None:
            out.append(f"{name:<{lw}} │ absent")
            continue
        eighths = round(v / top * width * 8)
        bar = "█" * (eighths // 8) + (BLOCKS[eighths % 8] if eighths % 8 else "")
        mark = "  ◀ peak" if v == top else ""
        out.append(f"{name:<{lw}} │{bar:<{width}} {v:,.0f} {unit}{mark}")
    return out


def line_chart(
    series: list[tuple[str, list[tuple[float, float]]]], height: int = 12, width: int = 60, ylabel: str = ""
) -> list[str]:
    """Several (x, y) series on one character grid, one marker per series, with a legend."""
    pts = [(x, y) for _, s in series for x, y in s if math.isfinite(y)]
    if not pts:
        return ["(no points)"]
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    # One mark per series and column: the mean of the points that fall in that column, so a long
    # noisy curve reads as a line instead of a cloud.
    cols: list[dict[int, float]] = []
    for _, s in series:
        acc: dict[int, list[float]] = {}
        for x, y in s:
            if math.isfinite(y):
                acc.setdefault(round((x - x0) / (x1 - x0) * (width - 1)), []).append(y)
        cols.append({c: sum(v) / len(v) for c, v in acc.items()})
    vals = [y for c in cols for y in c.values()]
    y0, y1 = min(vals), max(vals)
    if y1 == y0:
        y1 = y0 + 1e-9
    grid = [[" "] * width for _ in range(height)]
    for i, c in enumerate(cols):
        m = MARKERS[i % len(MARKERS)]
        for col, y in c.items():
            row = height - 1 - round((y - y0) / (y1 - y0) * (height - 1))
            grid[row][col] = m
    lab = [f"{y1:.3g}", f"{(y0 + y1) / 2:.3g}", f"{y0:.3g}"]
    lw = max(len(s) for s in lab)
    out = []
    for r, cells in enumerate(grid):
        tick = lab[0] if r == 0 else lab[2] if r == height - 1 else lab[1] if r == height // 2 else ""
        out.append(f"{tick:>{lw}} ┤{''.join(cells)}")
    out.append(f"{'':>{lw}} └{'─' * width}")
    left, right = f"{x0:g}", f"{x1:g}"
    out.append(f"{'':>{lw}}  {left}{right:>{width - len(left)}}")
    out.append(
        f"{'':>{lw}}  {ylabel}; " + ", ".join(f"{MARKERS[i % len(MARKERS)]} {n}" for i, (n, _) in enumerate(series))
    )
    return out


def read_curve(rdir: Path, name: str = runs.CURVE_FILE, column: str = "loss") -> list[tuple[float, float]]:
    """(step, value) pairs of a run's CSV (curve.csv: training loss; evals.csv: val_loss)."""
    return runs.read_series(Path(rdir) / name, column)


def mean_curve(curves: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """Per step, the mean over the runs that reached it."""
    by_step: dict[float, list[float]] = {}
    for c in curves:
        for x, y in c:
            if math.isfinite(y):
                by_step.setdefault(x, []).append(y)
    return [(x, sum(v) / len(v)) for x, v in sorted(by_step.items())]


def curve_charts(res: list[VariantResult], all_runs: list[sh.RunFiles]) -> list[str]:
    """Training and validation loss per variant: the mean over the seeds that count in the table above."""
    dirs = {r.id: r.dir for r in all_runs}
    train, val = [], []
    for r in res:
        if not r.runs:
            continue
        label = (
            f"{r.variant}"
            + (f" [{r.tag}]" if r.tag else "")
            + f" ({len(r.runs)} seed{'s' if len(r.runs) != 1 else ''})"
        )
        t = mean_curve([read_curve(dirs[rid]) for rid, _, _ in r.runs if rid in dirs])
        v = mean_curve([read_curve(dirs[rid], runs.EVALS_FILE, "val_loss") for rid, _, _ in r.runs if rid in dirs])
        if t:
            train.append((label, t))
        if v:
            val.append((label, v))
    out = []
    if train:
        out += (
            [
                "Training loss per update, mean over each variant's counted seeds (each column shows the mean of "
                "the updates it covers):",
                "",
                "```",
            ]
            + line_chart(train, ylabel="training loss vs update")
            + ["```", ""]
        )
    if val:
        out += ["Validation loss at each validation, mean over the same seeds:", "", "```"]
        out += line_chart(val, height=8, ylabel="val_loss vs update") + ["```"]
    return out or ["No completed series run has written a loss curve yet."]
