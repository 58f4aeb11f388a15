"""``cockpit check CAMPAIGN``: validate a notebook and print what it says.

A notebook that does not load gets one message naming the file, the TOML line
or the key path, and what to do (exit 2). One that loads gets a summary: the
question, what is held constant, the batch arithmetic, the variants and what
differs, the stop rules, the validation frequency and the runs so far.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping

from .. import arithmetic, notebook
from ..contract import Params


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("campaign", help="a campaign folder (campaigns/demo) or its campaign.toml")
    parser.add_argument(
        "--no-task", action="store_true", help="check the notebook only: do not import the task or size its splits"
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from .. import prestart, protocol

    nb = notebook.load(args.campaign)
    if nb.is_probe:
        command = " ".join(nb.probe.command) if nb.probe else "?"
        print(
            f"{nb.path}: valid; a probe campaign for `{command}`: no task to check "
            f"(`cockpit probe {nb.directory}` measures the script)"
        )
        return 0
    missing = prestart.task_missing(nb)
    if missing:
        raise notebook.NotebookError(f"{nb.path}: task.entry: {missing}")
    found: dict[str, object] = {}
    if not getattr(args, "no_task", False):
        found = prestart.refuse(nb, None, {})
    from ..termout import console, print_lines

    print_lines(console(), summary(nb, found))  # wrapped at the terminal's width
    changed, who = protocol.drift(nb)
    if changed:
        print(f"\ncockpit check: {protocol.drift_message(nb, changed, who)}", file=sys.stderr)
        return 1
    return 0


def summary(nb: notebook.Notebook, found: Mapping[str, object] | None = None) -> list[str]:
    """What the notebook says, and what the task check measured (``found``: the child's findings, absent with
    --no-task): the reference's split sizes, its model and one batch, and the epochs its budget sees."""
    c = nb.campaign
    out = [f"{nb.path}: valid.", ""]
    out += _pairs(
        [
            ("campaign", c.name),
            ("question", c.question or "(none written: say what this campaign decides)"),
            ("held constant", _held(c.held_constant)),
            ("quality", _quality(c)),
            ("task", nb.task.entry),
        ]
    )
    if nb.task.params:
        out.append("  task params    " + ", ".join(f"{k}={v}" for k, v in nb.task.params.items()))
    if c.notes:
        out.append(f"  notes          {c.notes}")

    ref = nb.reference
    ref_params = nb.params(ref.id)
    measured = _measured(found or {}, ref.id)
    train = measured[0].get("train") if measured[0] else None
    if train and not ref_params.get("dataset_size"):  # the task's own training split, as the pilot will count it
        ref_params = {**ref_params, "dataset_size": train}
    out += _task_lines(measured, ref.id)
    ref_plan = arithmetic.plan_from(ref_params)
    ref_budget, why_not = _budget(ref_plan, ref_params)
    out += ["", f"Batch arithmetic ({notebook.reference_words(ref.id)}):"]
    rows = arithmetic.describe(ref_plan, ref_budget)
    if ref_budget is None:
        rows.append(("budget", why_not))
    elif ref_budget.epochs_seen is None:
        rows.append(("epochs seen", "unknown: the task gives the dataset size (or set batch.dataset_size)"))
    t = nb.training
    clip = f", grad clip {t.grad_clip:g}" if t.grad_clip else ""
    rows.append(
        (
            "training",
            f"lr {t.lr:g}, {t.optimizer}, {t.schedule} schedule, precision {t.precision}{clip}",
        )
    )
    out += _pairs(rows)

    out += ["", f"Variants ({len(nb.variants)}):"]
    width = max(len(v.id) for v in nb.variants)
    for v in nb.variants:
        what = (notebook.role_words(v) or "the settings the variants change") if v is ref else _overrides(v)
        out.append(f"  {v.id:<{width}}  {what}" + (f" [{v.kind}]" if v.kind != "quality" else ""))
        if v.differs and v.differs != "reference":
            out.append(f"  {'':<{width}}    differs: {v.differs}")
        if v.why:
            out.append(f"  {'':<{width}}    why: {v.why}")
        if v is not ref and ref_budget is not None:
            out.append(f"  {'':<{width}}    batch: {_batch_change(nb, v, ref_plan, ref_budget)}")

    out += ["", f"Stop rules (protocol revision {nb.campaign.protocol_revision}: fixed once a training run exists):"]
    out += [f"  {line}" for line in _stop_lines(nb.stop)]
    every = nb.validation.every_updates
    val = f"every {every} updates"
    if ref_budget is not None and ref_budget.updates:
        val += f" ({ref_budget.updates // every} validations in {ref_budget.updates} updates)"
    out += ["", f"Validation: {val}" + (f"; {nb.validation.notes}" if nb.validation.notes else "")]
    if nb.probe is not None and nb.probe.command:
        import shlex

        p = nb.probe
        out.append(
            f"Probe: `{shlex.join(p.command)}`, {p.steps} optimizer steps watched"
            + (f", resumed by `{shlex.join(p.resume)}`" if p.resume else ", no resume command")
            + (", watched to its end" if p.to_end else "")
        )

    statuses = Counter(r.status for r in nb.runs)
    runs = f"Runs: {len(nb.runs)} recorded"
    if statuses:
        runs += " (" + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) + ")"
    out.append(runs)
    out.append(f"Decisions and observations: {len(nb.decisions)}")
    if nb.conclusion.text:
        chosen = f" (chose {nb.conclusion.chosen_variant})" if nb.conclusion.chosen_variant else ""
        out.append(f"Conclusion{chosen}: {nb.conclusion.text}")
    out += ["", arithmetic.CAVEAT]
    return out


def _measured(found: Mapping[str, object], vid: str) -> tuple[dict[str, int], dict[str, object]]:
    """The split sizes and the built model the task check reported for variant ``vid`` (empty when not run)."""
    splits, built = found.get("splits"), found.get("built")
    sizes = splits.get(vid) if isinstance(splits, dict) else None
    model = built.get(vid) if isinstance(built, dict) else None
    return (sizes if isinstance(sizes, dict) else {}), (model if isinstance(model, dict) else {})


def _task_lines(measured: tuple[dict[str, int], dict[str, object]], vid: str) -> list[str]:
    sizes, model = measured
    if not sizes and not model:
        return []
    rows = []
    if sizes:
        rows.append(("splits", ", ".join(f"{k} {n:,}" for k, n in sizes.items()) + " examples"))
    if model:
        n, t = int(str(model.get("parameters", 0))), int(str(model.get("trainable", 0)))
        how = "on the meta device (no memory)" if model.get("device") == "meta" else "at its real size on the CPU"
        rows.append(("model", f"{n:,} parameters, {t:,} trainable, built {how}"))
        rows.append(("one batch", str(model.get("batch") or "(empty)")))
    return ["", f"Task, imported in a child process (reference {vid}):", *_pairs(rows)]


def _pairs(rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows)
    width = max(width, 13)
    return [f"  {k:<{width}}  {v}" for k, v in rows]


def _held(held: str) -> str:
    return {
        "updates": "updates: every variant trains for the same number of optimizer updates",
        "epochs": "epochs: every variant sees the data the same number of times",
        "examples": "examples: every variant sees the same number of training examples",
    }.get(held, held)


def _quality(c: notebook.CampaignInfo) -> str:
    way = "higher is better" if c.higher_is_better else "lower is better"
    if c.quality_target is None:
        return f"{c.quality_metric} ({way}; no target)"
    sign = ">=" if c.higher_is_better else "<="
    return f"target {c.quality_metric} {sign} {c.quality_target:g} ({way})"


def _budget(plan: arithmetic.BatchPlan, params: Params) -> tuple[arithmetic.Budget | None, str]:
    try:
        return arithmetic.budget_from(plan, params), ""
    except ValueError:
        epochs = params.get("epochs")
        return None, (
            f"{epochs:g} epochs; updates depend on the dataset size, which comes from the task "
            f"(set batch.dataset_size to see them here)"
        )


def _overrides(v: notebook.Variant) -> str:
    if not v.set:
        return "no overrides (same settings as the reference)"
    return ", ".join(f"{k}={val}" for k, val in v.set.items())


def _batch_change(
    nb: notebook.Notebook,
    v: notebook.Variant,
    ref_plan: arithmetic.BatchPlan,
    ref_budget: arithmetic.Budget,
) -> str:
    held = nb.campaign.held_constant
    params = nb.params(v.id)
    plan = arithmetic.plan_from(params)
    own = [k for k in ("updates", "epochs", "examples") if k in v.set]
    if own:
        return (
            f"sets its own budget ({', '.join(f'{k}={v.set[k]}' for k in own)}) although the "
            f"campaign holds {held} constant; the comparison is then not like for like"
        )
    try:
        return arithmetic.what_changes(held, ref_plan, plan, ref_budget)
    except ValueError as exc:
        return str(exc)


def _stop_lines(s: notebook.StopRules) -> list[str]:
    lines = []
    lines.append("non-finite loss or gradient: stop" if s.nonfinite else "non-finite values: not a stop rule")
    if s.divergence_factor is not None:
        lines.append(f"divergence: stop when the loss exceeds {s.divergence_factor:g}x its start")
    if s.patience is not None:
        lines.append(f"patience: stop after {s.patience} validations without improvement")
    if s.wall_clock_minutes is not None:
        lines.append(f"wall clock: stop after {s.wall_clock_minutes:g} minutes")
    if s.notes:
        lines.append(f"notes: {s.notes}")
    return lines
