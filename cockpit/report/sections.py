"""The report's sections in markdown: what was held constant, every run, the spread across seeds, the conclusion.

Each section is a list of lines that ``cockpit.report.build`` puts under its
heading. The generated conclusion is here too: a neutral statement from the
figures, used when the notebook's [conclusion] text is empty. No torch.
"""

from __future__ import annotations

import shlex
from typing import Any

from .. import arithmetic, runs
from .. import events as ev
from .. import notebook as nbm
from .. import sheet as sh
from .figures import NotCounted, VariantResult

NOT_OK = ev.BAD_ENDINGS | {ev.Status.STOPPED.value}  # did not pass or complete


def _md_cell(x: Any) -> str:
    return str(x if x is not None else "").replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


def script_section(nb: nbm.Notebook, all_runs: list[sh.RunFiles]) -> list[str]:
    """A probe campaign's first section: the script, as its command line runs it, and the settings it gave."""
    command = shlex.join(nb.probe.command) if nb.probe else "?"
    out = [
        f"- a probe campaign: `{command}` measured from outside, phase by phase, as its author wrote it "
        "(made by `cockpit probe -- COMMAND`); it has no task, variants or settings of Cockpit's",
    ]
    probes = [r for r in all_runs if r.kind == "probe"]
    if probes:
        last = probes[-1]
        settings = last.frozen.get("params") or {}
        shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "none given (the script's defaults)"
        out.append(f"- the script's command-line settings (probe {last.id}): {shown}")
    if nb.campaign.notes:
        out.append(f"- notes: {nb.campaign.notes}")
    return out


def held_section(nb: nbm.Notebook) -> list[str]:
    c = nb.campaign
    out = [f"- held constant across variants: **{c.held_constant}**"]
    ref = nb.reference
    params = nb.params(ref.id)
    try:
        bplan = arithmetic.plan_from(params)
        budget = arithmetic.budget_from(bplan, params)
        out.append(
            f"- {nbm.reference_words(ref.id)}: {bplan.examples_per_update} examples per update (microbatch "
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
    from .. import protocol

    used: dict[tuple[int, str], list[str]] = {}
    now = protocol.rules(nb)
    for r in runs.training_runs(runs.campaign_runs(nb.directory)):
        rec = r.frozen.get("protocol")
        if not isinstance(rec, dict):
            continue
        diff = protocol.differences(rec, now)
        revision = rec.get("revision", 1)
        rev = int(revision) if isinstance(revision, (int, float, str)) else 1
        key = (rev, "; ".join(diff) if diff else "the rules stated above")
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


def runs_section(nb: nbm.Notebook, all_runs: list[sh.RunFiles]) -> list[str]:
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


def seeds_section(nb: nbm.Notebook, res: list[VariantResult], skipped: list[NotCounted]) -> list[str]:
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


def _better(nb: nbm.Notebook, x: float, y: float) -> bool:
    return x > y if nb.campaign.higher_is_better else x < y


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
    if nb.is_probe:
        probes = [r for r in all_runs if r.kind == "probe"]
        command = shlex.join(nb.probe.command) if nb.probe else "the script"
        parts.append(
            f"`{command}` was probed {len(probes)} time{'s' if len(probes) != 1 else ''}"
            + (f"; the latest, {probes[-1].id}, {probes[-1].status}: {probes[-1].stop_reason}." if probes else ".")
            + " A probe measures the memory and time of each phase of the script as it runs; it does not train "
            "to a result, so it prefers no setting."
        )
        if sheet is not None:
            parts.append(f"Machine: {sheet.recommendation}")
        return " ".join(parts)
    measured = [r for r in res if r.spread and not r.tag]  # the notebook's settings only
    ref_res = next((r for r in measured if r.variant == ref), None)
    if not measured:
        pilot = sh.latest_passed_pilot(all_runs, ref)
        parts.append(
            f"No series run at the notebook's settings has finished with a final {metric}, so no variant "
            f"can be preferred on measured quality; the {nbm.reference_words(ref)} stays the working choice by "
            "default, not by evidence."
        )
        parts.append(
            f"The reference's pilot {pilot.id} passed every gate."
            if pilot
            else f"No pilot of the {nbm.reference_words(ref)} has passed every gate yet."
        )
    elif ref_res is None:
        best = min(measured, key=lambda r: sign * _mean(r))
        parts.append(
            f"The {nbm.reference_words(ref)} has no completed series run, so no variant can be compared with it; "
            f"the best mean {metric} among measured variants is {best.variant} ({_mean(best):.4f}, "
            f"{_n(best)} seed{'s' if _n(best) != 1 else ''})."
        )
    else:
        winners = [r for r in measured if r.verdict == "better"]
        if winners:
            w = min(winners, key=lambda r: sign * _mean(r))
            parts.append(
                f"{w.variant} reached a better mean final {metric} than the {nbm.reference_words(ref)}: "
                f"{_mean(w):.4f} vs {_mean(ref_res):.4f} over {_n(w)} and "
                f"{_n(ref_res)} seeds ({w.sentence})."
            )
        else:
            parts.append(
                f"The {nbm.reference_words(ref)} stays the best choice: no variant reached a better mean final {metric} "
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


def conclusion_section(nb: nbm.Notebook, generated: str) -> list[str]:
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
