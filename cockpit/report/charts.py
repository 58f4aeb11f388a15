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
from .. import plan as pl
from .. import sheet as sh
from .figures import VariantResult, read_curve

INSTALL_HINT = "Pictures: `pip install 'cockpit[report]'` (matplotlib) and run `cockpit report` again."
LOSS_SVG = "loss.svg"
QUALITY_SVG = "quality.svg"
MEMORY_SVG = "memory.svg"
TIME_SVG = "time.svg"
PLAN_SVG = "plan.svg"
MIB = 2**20


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
    ends = 0
    for run in all_runs:
        if run.status != "diverged" or run.kind != "train":
            continue
        c = read_curve(run.dir)
        if c:
            ax.plot([x for x, _ in c], [y for _, y in c], color="0.45", lw=0.8, ls=":")
            (end,) = ax.plot([c[-1][0]], [c[-1][1]], "x", color="crimson", ms=9, mew=2)
            end.set_gid(f"diverged-{run.id}")
            ends += 1
    if not drawn:
        plt.close(fig)
        return False
    if ends:
        ax.plot([], [], "x", color="crimson", label="diverged run (its end)")
    ax.set_xlabel("update")
    ax.set_ylabel("training loss")
    ax.set_title("Training loss per update: median of the counted seeds, band min-max")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _save(plt, fig, target)
    return True


def quality_chart(res: list[VariantResult], metric: str, target: Path) -> bool:
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
    ax.set_xlabel(f"final {metric} per seed (| = mean)")
    ax.set_title("Final quality per variant: every seed a point")
    if ref is not None:
        ax.legend(fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    _save(plt, fig, target)
    return True


def _gids(bars: Any, gid: str) -> None:
    """A bar chart's container has no id in the SVG: each bar gets ``<gid>-<n>``, n its row."""
    for n, rect in enumerate(bars):
        rect.set_gid(f"{gid}-{n}")


def phase_name(r: sh.PhaseRow) -> str:
    return r["phase"] + (f" r{r['rank']}" if r["rank"] is not None else "")


def memory_chart(sheets: list[sh.Sheet], target: Path) -> bool:
    """Memory per phase of every measured pilot (the reference first, then each memory variant with its own):
    torch's peak allocated and peak reserved on a GPU (two counters that do not add, drawn side by side), the
    process RSS peak on the CPU, labelled. The numbers are the sheet's rows, the same the text chart draws."""
    if not sheets:
        return False
    gpu = all(s.measured_gpu for s in sheets)
    series: list[tuple[str, str, list[float | None]]] = []  # (gid, label, MiB per phase)
    phases: list[str] = []
    for s in sheets:
        for r in s.phases:
            if phase_name(r) not in phases:
                phases.append(phase_name(r))
    for j, s in enumerate(sheets):
        by = {phase_name(r): r for r in s.phases}
        who = f"{s.variant} ({s.run_id})"
        keys = (("peak_allocated", "torch peak allocated"), ("peak_reserved", "torch peak reserved"))
        for key, what in keys if gpu else (("rss_peak", "process RSS peak (host)"),):
            vals: list[float | None] = []
            for ph in phases:
                v = by[ph][key] if ph in by else None  # type: ignore[literal-required]
                vals.append(v / MIB if v is not None else None)
            series.append((f"memory-{j}-{key}", f"{who}: {what}", vals))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(phases) * max(1, len(series)) ** 0.5 + 2))
    height = 0.8 / len(series)
    for k, (gid, lab, vals) in enumerate(series):
        ys = [i + (k - (len(series) - 1) / 2) * height for i in range(len(phases))]
        bars = ax.barh(ys, [v if v is not None else 0.0 for v in vals], height=height, color=f"C{k % 10}", label=lab)
        _gids(bars, gid)
    ax.set_yticks(range(len(phases)), phases)
    ax.invert_yaxis()
    ax.set_xlabel("MiB, the phase's peak" + ("" if gpu else "; GPU memory was not measured on this machine"))
    ax.set_title("Memory per phase" + (": the memory variants against the reference" if len(sheets) > 1 else ""))
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    _save(plt, fig, target)
    return True


def time_chart(sheets: list[sh.Sheet], target: Path) -> bool:
    """Measured duration of every phase of each measured pilot, in seconds (the gate rows' duration_s)."""
    rows = [(s, [r for r in s.phases if r["duration_s"] is not None]) for s in sheets]
    rows = [(s, rs) for s, rs in rows if rs]
    if not rows:
        return False
    phases: list[str] = []
    for _, rs in rows:
        for r in rs:
            if phase_name(r) not in phases:
                phases.append(phase_name(r))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(phases) + 2))
    height = 0.8 / len(rows)
    for k, (s, rs) in enumerate(rows):
        by = {phase_name(r): r["duration_s"] for r in rs}
        ys = [i + (k - (len(rows) - 1) / 2) * height for i in range(len(phases))]
        bars = ax.barh(
            ys,
            [by.get(ph) or 0.0 for ph in phases],
            height=height,
            color=f"C{k % 10}",
            label=f"{s.variant} ({s.run_id})",
        )
        _gids(bars, f"time-{k}")
    ax.set_yticks(range(len(phases)), phases)
    ax.invert_yaxis()
    ax.set_xlabel("seconds, as the gate measured the phase")
    ax.set_title("Time per phase")
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    _save(plt, fig, target)
    return True


def plan_chart(p: pl.Plan, target: Path) -> bool:
    """Each package's days as hours: the runs that fit, the reserve kept for evaluation and export, what is
    left out, against the hours the rental has (the plan's own figures, as ``cockpit plan`` prints them)."""
    pkgs = p.packages
    if not pkgs:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.7 * len(pkgs) + 1.8))
    names = [f"{k.days} days" for k in pkgs]
    runs_h = [k.used_h for k in pkgs]
    reserve = [k.reserve_h for k in pkgs]
    left = [sum(h for _, _, h in k.left_out) for k in pkgs]
    a = ax.barh(names, runs_h, color="C0", label="runs that fit")
    _gids(a, "plan-runs")
    b = ax.barh(names, reserve, left=runs_h, color="C2", label="reserve (evaluation, export)")
    _gids(b, "plan-reserve")
    c = ax.barh(
        names,
        left,
        left=[x + y for x, y in zip(runs_h, reserve, strict=True)],
        color="0.75",
        hatch="//",
        label="left out (does not fit; hours one after another)",
    )
    _gids(c, "plan-left-out")
    for i, k in enumerate(pkgs):
        (m,) = ax.plot([k.total_h, k.total_h], [i - 0.45, i + 0.45], color="black", lw=2)
        m.set_gid(f"plan-total-{k.days}")
        ax.annotate(
            f" {len(k.fits)} runs fit" + (f", {len(k.left_out)} left out" if k.left_out else ""),
            (runs_h[i] + reserve[i] + left[i], i),
            ha="left",
            va="center",
            fontsize=8,
        )
    ax.plot([], [], color="black", lw=2, label="hours rented")
    ax.invert_yaxis()
    ax.set_xlabel(
        "hours of the rental" + (f" (runs {p.lanes} side by side: the busiest lane's hours)" if p.lanes > 1 else "")
    )
    ax.set_title("Rental plan: what each package holds")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    _save(plt, fig, target)
    return True


def write_charts(
    folder: Path,
    metric: str,
    res: list[VariantResult],
    all_runs: list[sh.RunFiles],
    reference: str,
    sheets: list[sh.Sheet] | None = None,
    plan: pl.Plan | None = None,
) -> list[str]:
    """Write the SVGs into ``folder`` and return report.md's lines embedding them (or the one-line hint)."""
    if not available():
        return [INSTALL_HINT]
    out = []
    if loss_chart(res, all_runs, reference, folder / LOSS_SVG):
        out += [f"![Training loss per update per variant]({LOSS_SVG})", ""]
    if quality_chart(res, metric, folder / QUALITY_SVG):
        out += [f"![Final quality per variant, every seed]({QUALITY_SVG})", ""]
    if sheets and memory_chart(sheets, folder / MEMORY_SVG):
        out += [f"![Memory per phase]({MEMORY_SVG})", ""]
    if sheets and time_chart(sheets, folder / TIME_SVG):
        out += [f"![Time per phase]({TIME_SVG})", ""]
    if plan is not None and plan_chart(plan, folder / PLAN_SVG):
        out += [f"![Rental plan, hours per package]({PLAN_SVG})", ""]
    return out or ["No counted run to draw."]
