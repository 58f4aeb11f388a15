"""``campaigns/<c>/report/report.md``: the campaign's conclusion, readable without Cockpit. No torch.

It gathers what the notebook and the run folders say: the question, what
was held constant, every run (failed, diverged and crashed ones with their
reasons), the spread across seeds, the decisions with their dates, the
selection sheet, the rental plan and the conclusion. The conclusion is the
notebook's [conclusion] text when someone wrote one; otherwise a neutral
statement generated from the figures, labelled as generated. Charts are
text (Unicode), so the report needs no plotting library.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import arithmetic, fsutil, runs
from . import notebook as nbm
from . import plan as pl
from . import sheet as sh
from .errors import CockpitError

REPORT_DIR = "report"
REPORT_FILE = "report.md"
NOT_OK = ("failed", "diverged", "oom", "error", "crashed", "stopped")
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
    from .compare import group_runs, train_runs

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


def _better(nb: nbm.Notebook, x: float, y: float) -> bool:
    return x > y if nb.campaign.higher_is_better else x < y


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


def _curve_charts(res: list[VariantResult], all_runs: list[sh.RunFiles]) -> list[str]:
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


# --------------------------------------------------------------------------- sections


def _md_cell(x: Any) -> str:
    return str(x if x is not None else "").replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


def _held(nb: nbm.Notebook) -> list[str]:
    c = nb.campaign
    out = [f"- held constant across variants: **{c.held_constant}**"]
    ref = nb.reference
    params = nb.params(ref.id)
    try:
        bplan = arithmetic.plan_from(params)
        budget = arithmetic.budget_from(bplan, params)
        out.append(
            f"- reference {ref.id}: {bplan.examples_per_update} examples per update (microbatch "
            f"{bplan.microbatch} x accumulation {bplan.accumulation} x {bplan.data_replicas} replica"
            f"{'s' if bplan.data_replicas != 1 else ''}), {budget.updates} updates, "
            f"{budget.examples_seen:,} examples seen"
        )
    except (ValueError, KeyError) as exc:
        out.append(f"- reference budget: not resolved ({exc})")
    t = nb.training
    out.append(
        f"- training: {t.optimizer}, lr {t.lr:g}, {t.schedule} schedule, weight decay {t.weight_decay:g}, "
        f"precision {t.precision}" + (f", grad clip {t.grad_clip:g}" if t.grad_clip else "")
    )
    s = nb.stop
    rules = []
    if s.nonfinite:
        rules.append("non-finite loss or gradient")
    if s.divergence_factor:
        rules.append(f"loss above {s.divergence_factor:g}x its start")
    if s.patience:
        rules.append(f"{s.patience} validations without improvement")
    if s.wall_clock_minutes:
        rules.append(f"{s.wall_clock_minutes:g} min wall clock")
    out.append(
        f"- protocol revision {c.protocol_revision} (the rules as the notebook states them now): stop on "
        f"{', '.join(rules) or 'nothing'}; validation every {nb.validation.every_updates} updates"
    )
    out += _protocols_used(nb)
    if c.notes:
        out.append(f"- notes: {c.notes}")
    if s.notes:
        out.append(f"- stop-rule notes: {s.notes}")
    out += ["", "Variants (what differs from the reference and why):", ""]
    out += _table(
        ["variant", "reference", "differs", "settings", "kind", "why"],
        [
            [
                v.id,
                "yes" if v.reference else "",
                v.differs,
                ", ".join(f"{k}={val}" for k, val in v.set.items()) or "as the reference",
                v.kind,
                v.why,
            ]
            for v in nb.variants
        ],
    )
    return out


def _protocols_used(nb: nbm.Notebook) -> list[str]:
    """The rules each training run actually used, from its run.toml, grouped by revision."""
    from . import protocol

    used: dict[tuple[int, str], list[str]] = {}
    now = protocol.rules(nb)
    for r in runs.training_runs(runs.campaign_runs(nb.directory)):
        rec = r.frozen.get("protocol")
        if not isinstance(rec, dict):
            continue
        diff = protocol.differences(rec, now)
        key = (int(rec.get("revision", 1)), "; ".join(diff) if diff else "the rules stated above")
        used.setdefault(key, []).append(r.id)
    out = []
    for (rev, rules_text), ids in sorted(used.items()):
        drift = rev == nb.campaign.protocol_revision and rules_text != "the rules stated above"
        out.append(
            f"- runs {', '.join(ids)} used protocol revision {rev}: "
            + (
                f"rules that differ from the notebook's now ({rules_text}): a change after the runs that "
                "`cockpit check` reports"
                if drift
                else rules_text
                if rev == nb.campaign.protocol_revision
                else f"{rules_text} (compared only among themselves)"
            )
        )
    return out


def _peak(r: sh.RunFiles | None) -> str:
    """A run's peak by the one rule, with the counter named; "absent" when not measured."""
    peak, counter = r.peak if r is not None else (None, "")
    return f"{peak:,.0f} ({counter})" if peak is not None else "absent"


def _runs_section(nb: nbm.Notebook, all_runs: list[sh.RunFiles]) -> list[str]:
    by_id = {r.id: r for r in all_runs}
    metric = nb.campaign.quality_metric
    rows = []
    listed = set()
    for row in runs.view(nb):
        listed.add(row.id)
        r = by_id.get(row.id)
        peak = _peak(r)
        val = sh.metric_value(r.metrics if r else None, metric)
        rows.append(
            [
                row.id,
                row.kind,
                row.variant,
                row.seed,
                row.status,
                row.phase or "",
                row.stop_reason,
                peak,
                f"{row.duration_s:.1f}" if row.duration_s is not None else "",
                f"{val:.4f}" if val is not None else "",
                row.follows,
                row.verdict,
            ]
        )
    for r in all_runs:  # a folder the notebook does not list still appears
        if r.id not in listed:
            rows.append(
                [
                    r.id + " (folder only)",
                    r.kind,
                    r.variant,
                    r.seed,
                    r.status,
                    r.phase or "",
                    r.stop_reason,
                    "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
    out = _table(
        [
            "run",
            "kind",
            "variant",
            "seed",
            "status",
            "phase reached",
            "stop reason",
            "peak MiB",
            "time s",
            f"final {metric}",
            "follows",
            "verdict",
        ],
        rows,
    )
    bad = [row for row in nb.runs if row.status in NOT_OK]
    bad_folder = [r for r in all_runs if r.id not in listed and r.status in NOT_OK]
    out += ["", "Runs that did not pass or complete, with their reasons:", ""]
    if not bad and not bad_folder:
        out.append("- none: every run passed, completed or is still running")
    for row in bad:
        follows = [x.id for x in nb.runs if x.follows == row.id]
        out.append(
            f"- **{row.id}** ({row.kind}, {row.variant}, seed {row.seed}) **{row.status}** in phase "
            f"{row.phase or 'start-up'}: {row.stop_reason or 'no reason recorded'}"
            + (f"; followed by {', '.join(follows)}" if follows else "")
        )
    for r in bad_folder:
        out.append(f"- **{r.id}** ({r.kind}, {r.variant}, seed {r.seed}) **{r.status}**: {r.stop_reason}")
    return out


def _seeds_section(nb: nbm.Notebook, res: list[VariantResult], skipped: list[NotCounted]) -> list[str]:
    metric = nb.campaign.quality_metric
    better = "higher is better" if nb.campaign.higher_is_better else "lower is better"
    out: list[str] = []
    if not any(r.spread for r in res):
        out.append(
            f"No series run has finished with a final {metric}: there is no spread across seeds to report "
            "and no variant can be preferred on measured quality."
        )
    else:
        out += [
            f"Final {metric} per variant ({better}), computed as `cockpit compare` does: per seed the latest "
            "completed run counts, every seed is listed and none is dropped; sd is the sample standard deviation "
            "(n-1). A difference of means from the reference counts only when it is larger than the seeds' "
            "spread (the larger of the two ranges, max - min); with one seed on a side nothing is "
            "distinguishable. Runs with settings other than the notebook's are grouped apart.",
            "",
        ]
        rows = []
        for r in res:
            s = r.spread
            if s is None:
                continue
            rows.append(
                [
                    r.variant,
                    r.tag or "as in the notebook",
                    s.n,
                    f"{s.mean:.4f}",
                    f"{s.std:.4f}" if s.std is not None else "n/a",
                    f"{s.min:.4f}",
                    f"{s.max:.4f}",
                    ", ".join(f"s{seed} {v:.4f} ({rid})" for rid, seed, v in r.runs),
                    r.sentence,
                    r.target,
                ]
            )
        out += _table(
            ["variant", "settings", "seeds", "mean", "sd", "min", "max", "every seed", "vs reference", "target"], rows
        )
    if skipped:
        out += ["", "Series runs not counted in these figures:", ""]
        for x in skipped:
            why = (
                f"superseded by {x.superseded_by} (a later completed run of the same seed)"
                if x.superseded_by
                else f"{x.status}: {x.reason or 'no reason recorded'}"
            )
            out.append(f"- {x.id} ({x.variant} seed {x.seed}): {why}")
    return out


def _mean(r: VariantResult) -> float:
    assert r.spread is not None  # only measured variants are named
    return r.spread.mean


def _n(r: VariantResult) -> int:
    assert r.spread is not None
    return r.spread.n


def generated_conclusion(
    nb: nbm.Notebook, res: list[VariantResult], all_runs: list[sh.RunFiles], sheet: sh.Sheet | None
) -> str:
    ref = nb.reference.id
    metric = nb.campaign.quality_metric
    sign = -1 if nb.campaign.higher_is_better else 1
    parts = []
    measured = [r for r in res if r.spread and not r.tag]  # the notebook's settings only
    ref_res = next((r for r in measured if r.variant == ref), None)
    if not measured:
        pilot = sh.latest_passed_pilot(all_runs, ref)
        parts.append(
            f"No series run at the notebook's settings has finished with a final {metric}, so no variant "
            f"can be preferred on measured quality; the reference {ref} stays the working choice by "
            "default, not by evidence."
        )
        parts.append(
            f"The reference's pilot {pilot.id} passed every gate."
            if pilot
            else f"No pilot of the reference {ref} has passed every gate yet."
        )
    elif ref_res is None:
        best = min(measured, key=lambda r: sign * _mean(r))
        parts.append(
            f"The reference {ref} has no completed series run, so no variant can be compared with it; "
            f"the best mean {metric} among measured variants is {best.variant} ({_mean(best):.4f}, "
            f"{_n(best)} seed{'s' if _n(best) != 1 else ''})."
        )
    else:
        winners = [r for r in measured if r.verdict == "better"]
        if winners:
            w = min(winners, key=lambda r: sign * _mean(r))
            parts.append(
                f"{w.variant} reached a better mean final {metric} than the reference {ref}: "
                f"{_mean(w):.4f} vs {_mean(ref_res):.4f} over {_n(w)} and "
                f"{_n(ref_res)} seeds ({w.sentence})."
            )
        else:
            parts.append(
                f"The reference {ref} stays the best choice: no variant reached a better mean final {metric} "
                f"by more than the spread between seeds (reference mean {_mean(ref_res):.4f} over "
                f"{_n(ref_res)} seed{'s' if _n(ref_res) != 1 else ''})."
            )
        if nb.campaign.quality_target is not None:
            t = nb.campaign.quality_target
            hit = [r.variant for r in measured if _better(nb, _mean(r), t) or _mean(r) == t]
            parts.append(f"Mean final {metric} at or better than the target {t:g}: {', '.join(hit) or 'none'}.")
    bad = [r for r in nb.runs if r.status in NOT_OK]
    if bad:
        parts.append(
            f"{len(bad)} run{'s' if len(bad) != 1 else ''} did not pass or complete "
            f"({', '.join(f'{r.id} {r.status}' for r in bad)}); each keeps its row and reason above."
        )
    unmeasured = [v.id for v in nb.variants if v.kind == "memory" and not any(r.variant == v.id for r in measured)]
    if unmeasured:
        parts.append(
            f"Quality not measured for the memory variant{'s' if len(unmeasured) > 1 else ''} "
            f"{', '.join(unmeasured)}: their pilots measured memory and time only, and precision, microbatch or "
            "max_length can change the result; one training run each settles it before one is chosen."
        )
    if sheet is not None:
        parts.append(f"Machine: {sheet.recommendation}")
    return " ".join(parts)


def _conclusion(nb: nbm.Notebook, generated: str) -> list[str]:
    c = nb.conclusion
    if c.text.strip():
        head = f"Written in the notebook ([conclusion]{', ' + c.date if c.date else ''})"
        out = [f"*{head}:*", "", c.text.strip()]
        if c.chosen_variant:
            out += [
                "",
                f"Chosen variant: **{c.chosen_variant}**"
                + (" (the reference)" if c.chosen_variant == nb.reference.id else ""),
            ]
        out += ["", f"*For comparison, the statement generated from the figures:* {generated}"]
        return out
    return [
        "*Generated from the figures in this report, not written by a person (write one in the notebook's "
        "[conclusion] text to replace it):*",
        "",
        generated,
    ]


# --------------------------------------------------------------------------- the report


def build(campaign: Path | str, days: tuple[int, ...] = pl.DEFAULT_DAYS, seeds: int = pl.DEFAULT_SEEDS) -> str:
    nb = nbm.load(campaign)
    all_runs = runs.campaign_runs(nb.directory)
    c = nb.campaign
    chosen = nb.conclusion.chosen_variant or nb.reference.id
    try:
        built = sh.build(nb, chosen, all_runs)
        sheet: sh.Sheet | None = built
        sheet_lines = sh.render(built)
    except CockpitError as exc:
        sheet, sheet_lines = None, [f"No selection sheet: {exc}"]
    if nb.selection.gpu and sheet is not None:
        sheet_lines += [
            "",
            f"Recorded in the notebook's [selection]: GPU {nb.selection.gpu}"
            + (
                f", {nb.selection.memory_per_gpu_mib:,.0f} MiB per GPU"
                if nb.selection.memory_per_gpu_mib is not None
                else ""
            ),
        ]
    p = pl.build(nb, days=days, seeds=seeds, all_runs=all_runs)
    plan_lines = pl.render(p)
    if nb.rental.plan:
        plan_lines += [
            "",
            f"Recorded in the notebook's [rental] ({nb.rental.days} days):",
            "",
            "```",
            nb.rental.plan,
            "```",
        ]
    res, skipped = results(nb)
    generated = generated_conclusion(nb, res, all_runs, sheet)
    now = _dt.datetime.now().astimezone().isoformat(timespec="seconds")

    out = [
        f"# Campaign {c.name}: report",
        "",
        f"Generated by `cockpit report` on {now} from {nb.path} and the run folders in "
        f"{runs.runs_dir(nb.directory)}. Every figure is measured by a run named here, unless it says otherwise.",
        "",
        "## Question",
        "",
        c.question or "(no question written in the notebook)",
        "",
        "## What was held constant",
        "",
    ]
    out += _held(nb)
    out += [
        "",
        "## Runs",
        "",
        f"Every run of the campaign, in order ({len(nb.runs)}), failed and diverged ones included.",
        "",
    ]
    out += _runs_section(nb, all_runs)
    out += ["", "## Spread across seeds", ""]
    out += _seeds_section(nb, res, skipped)
    out += ["", "## Decisions", ""]
    if nb.decisions:
        for d in sorted(nb.decisions, key=lambda d: d.date):
            out.append(f"- {d.date} ({d.kind}): {d.text}" + (f" (runs {', '.join(d.runs)})" if d.runs else ""))
    else:
        out.append("- none recorded")
    out += ["", "## Selection sheet", ""] + sheet_lines
    out += ["", "## Rental plan", ""] + plan_lines
    out += ["", "## Conclusion", ""] + _conclusion(nb, generated)
    out += ["", "## Charts", "", "### Loss curves", ""]
    out += _curve_charts(res, all_runs)
    out += ["", "### Memory per phase", ""]
    if sheet is not None:
        gpu = sheet.measured_gpu
        key, unit = ("peak_reserved", "MiB torch peak reserved") if gpu else ("rss_peak", "MiB process RSS (host)")
        rows = []
        for r in sheet.phases:
            name = r["phase"] + (f" r{r['rank']}" if r["rank"] is not None else "")
            rows.append((name, r[key] / 2**20 if r[key] is not None else None))
        out.append(
            f"Pilot {sheet.run_id} ({sheet.variant}), {unit}"
            + ("" if gpu else "; GPU memory was not measured on this machine")
            + ":"
        )
        out += ["", "```"] + bar_chart(rows, "MiB") + ["```"]
    else:
        out.append("No passed pilot: no memory per phase to chart.")
    return "\n".join(out) + "\n"


def write(campaign: Path | str, **kw: Any) -> Path:
    """Write report/report.md atomically; a ``report`` that is a link (or not a folder) is refused, never written through."""
    path = nbm.find(campaign)
    folder = path.parent / REPORT_DIR
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        what = "a symbolic link" if folder.is_symlink() else "not a folder"
        raise CockpitError(
            f"{folder}: {what}; Cockpit writes the report only into the campaign's own report/ folder and never "
            "through a link out of it. Remove it (or replace it by a folder) and run `cockpit report` again."
        )
    target = folder / REPORT_FILE
    text = build(path, **kw)
    folder.mkdir(exist_ok=True)
    fsutil.write_text(target, text)
    return target
