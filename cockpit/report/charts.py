"""The report's pictures: SVG charts beside report.md, drawn by matplotlib (the ``cockpit[report]`` extra).

The numbers are the records the text report reads (:func:`.figures.results`
and the counted runs' curve.csv through :func:`.figures.read_curve`), never
recomputed apart. SVGs are deterministic (fixed hash salt, no date) and keep
their text as text, and every series carries an id (``set_gid``) so a test or a
reader can find it in the file. No torch.
"""

from __future__ import annotations

import io
import statistics
from pathlib import Path
from typing import Any

from .. import fsutil
from .. import sheet as sh
from .figures import VariantResult, read_curve

INSTALL_HINT = "Pictures: `pip install 'cockpit[report]'` (matplotlib) and run `cockpit report` again."
LOSS_SVG = "loss.svg"
QUALITY_SVG = "quality.svg"


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def label(r: VariantResult) -> str:
    return r.variant + (f" [{r.tag}]" if r.tag else "")


def seed_band(curves: list[list[tuple[float, float]]]) -> list[tuple[float, float, float, float]]:
    """Per update: (update, median, min, max) over the seeds that reached it."""
    by_step: dict[float, list[float]] = {}
    for c in curves:
        for x, y in c:
            by_step.setdefault(x, []).append(y)
    return [(x, statistics.median(v), min(v), max(v)) for x, v in sorted(by_step.items())]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "cockpit"
    plt.rcParams["svg.fonttype"] = "none"
    return plt


def _save(plt: Any, fig: Any, target: Path) -> None:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    fsutil.write_text(target, buf.getvalue())


def loss_chart(res: list[VariantResult], all_runs: list[sh.RunFiles], reference: str, target: Path) -> bool:
    """Training loss per update: per variant the median of its counted seeds, the band min-max, the reference
    drawn thicker, and each diverged run's curve ending in a cross. False when no run wrote a curve."""
    plt = _pyplot()
    dirs = {r.id: r.dir for r in all_runs}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = False
    for i, r in enumerate(res):
        band = seed_band([read_curve(dirs[rid]) for rid, _, _ in r.runs if rid in dirs])
        if not band:
            continue
        drawn = True
        xs = [b[0] for b in band]
        ref = r.variant == reference and not r.tag
        (line,) = ax.plot(
            xs,
            [b[1] for b in band],
            color=f"C{i % 10}",
            lw=2.6 if ref else 1.4,
            label=f"{label(r)} ({len(r.runs)} seeds)" + (" reference" if ref else ""),
        )
        line.set_gid(f"loss-median-{i}")
        fill = ax.fill_between(xs, [b[2] for b in band], [b[3] for b in band], color=f"C{i % 10}", alpha=0.18, lw=0)
        fill.set_gid(f"loss-band-{i}")
    for run in all_runs:
        if run.status != "diverged" or run.kind != "train":
            continue
        c = read_curve(run.dir)
        if c:
            ax.plot([x for x, _ in c], [y for _, y in c], color="0.45", lw=0.8, ls=":")
            (end,) = ax.plot([c[-1][0]], [c[-1][1]], "x", color="crimson", ms=9, mew=2)
            end.set_gid(f"diverged-{run.id}")
    if not drawn:
        plt.close(fig)
        return False
    ax.plot([], [], "x", color="crimson", label="diverged run (its end)")
    ax.set_xlabel("update")
    ax.set_ylabel("training loss")
    ax.set_title("Training loss per update: median of the counted seeds, band min-max")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _save(plt, fig, target)
    return True


def quality_chart(res: list[VariantResult], target_name: str, target: Path) -> bool:
    """Every counted seed's final value as a point per variant, the variant's mean as a bar, and the reference's
    min-max shaded across: a variant whose seeds fall inside it is not distinguishable from the reference."""
    rows = [r for r in res if r.runs]
    if not rows:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.8))
    ref = next((r for r in rows if r.verdict == "reference"), None)
    if ref is not None and ref.spread is not None:
        span = ax.axvspan(ref.spread.min, ref.spread.max, color="0.85", zorder=0, label="reference seeds' min-max")
        span.set_gid("reference-band")
    for i, r in enumerate(rows):
        pts = ax.plot([v for _, _, v in r.runs], [i] * len(r.runs), "o", color=f"C{i % 10}", ms=7)[0]
        pts.set_gid(f"seeds-{i}")
        if r.spread is not None:
            ax.plot([r.spread.mean], [i], "|", color="black", ms=16, mew=2)
    ax.set_yticks(range(len(rows)), [f"{label(r)}: {r.verdict}" for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"final {target_name or 'value'} per seed (| = mean)")
    ax.set_title("Final quality per variant: every seed a point")
    if ref is not None:
        ax.legend(fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    _save(plt, fig, target)
    return True


def write_charts(folder: Path, res: list[VariantResult], all_runs: list[sh.RunFiles], reference: str) -> list[str]:
    """Write the SVGs into ``folder`` and return report.md's lines embedding them (or the one-line hint)."""
    if not available():
        return [INSTALL_HINT]
    out = []
    target_name = next((r.target for r in res if r.target), "")
    if loss_chart(res, all_runs, reference, folder / LOSS_SVG):
        out += [f"![Training loss per update per variant]({LOSS_SVG})", ""]
    if quality_chart(res, target_name, folder / QUALITY_SVG):
        out += [f"![Final quality per variant, every seed]({QUALITY_SVG})", ""]
    return out or ["No counted run to draw."]
