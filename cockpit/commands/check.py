"""``cockpit check CAMPAIGN``: validate a notebook and print what it says.

A notebook that does not load gets one message naming the file, the TOML line
or the key path, and what to do (exit 2). One that loads gets a summary: the
question, what is held constant, the batch arithmetic, the variants and what
differs, the stop rules, the validation frequency and the runs so far.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from .. import arithmetic, notebook
from ..contract import Params
from ..runs import TomlValue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("campaign", help="a campaign folder (campaigns/demo) or its campaign.toml")
    parser.add_argument(
        "--no-task", action="store_true", help="check the notebook only: do not import the task or size its splits"
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from .. import protocol

    nb = notebook.load(args.campaign)
    if nb.is_probe:
        command = " ".join(nb.probe.command) if nb.probe else "?"
        print(
            f"{nb.path}: valid; a probe campaign for `{command}`: no task to check "
            f"(`cockpit probe {nb.directory}` measures the script)"
        )
        return 0
    missing = task_missing(nb)
    if missing:
        raise notebook.NotebookError(f"{nb.path}: task.entry: {missing}")
    if not getattr(args, "no_task", False):
        refuse_what_the_task_shows(nb, None, {})
    from ..termout import console, print_lines

    print_lines(console(), summary(nb))  # wrapped at the terminal's width
    changed, who = protocol.drift(nb)
    if changed:
        print(f"\ncockpit check: {protocol.drift_message(nb, changed, who)}", file=sys.stderr)
        return 1
    return 0


TASK_CHECK_TIMEOUT_S = 900.0  # a task whose datasets() reads a large corpus takes a while; a hung one does not pass


def task_problems(nb: notebook.Notebook, variants: list[str] | None, overrides: dict[str, TomlValue]) -> list[str]:
    """Import the task and size its splits in a child process (the CLI imports neither torch nor user code)."""
    import json
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "cockpit.pilot.taskcheck"]
    if overrides:
        cmd += ["--overrides", json.dumps(overrides, default=str)]
    cmd += [str(nb.path), *(variants or [])]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TASK_CHECK_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return [
            f"{nb.path}: importing the task and reading its splits took over {TASK_CHECK_TIMEOUT_S:.0f} s; "
            "make datasets() lazy, or skip this check with --no-task"
        ]
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        out = json.loads(last[0])
    except ValueError:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])[:600]
        return [f"{nb.path}: the task could not be checked (exit {proc.returncode}): {tail}"]
    return [f"{p['where']}: {p['what']}" for p in out.get("problems", [])]


def refuse_what_the_task_shows(
    nb: notebook.Notebook, variants: list[str] | None, overrides: dict[str, TomlValue], lead: str = ""
) -> None:
    """Raise the problems the task check found, one paragraph each, before anything is written."""
    from ..errors import UsageError

    found = task_problems(nb, variants, overrides)
    if found:
        raise UsageError(lead + "\n".join(found))


def task_missing(nb: notebook.Notebook) -> str:
    """What is wrong with ``[task] entry`` that can be told without importing it (so without torch), or ""."""
    entry = nb.task.entry
    where = entry.rpartition(":")[0]
    if where.endswith(".py"):
        cands = [Path(where)] if Path(where).is_absolute() else [nb.directory / where, Path(where)]
        if any(c.is_file() for c in cands):
            return ""
        looked = " and ".join(dict.fromkeys(str(c) for c in cands))
        return (
            f"the task file {where!r} does not exist (looked for {looked}); a path in the entry is relative "
            "to the campaign folder or the current folder. Fix the path, then run `cockpit check` again."
        )
    if _module_found(where, [str(nb.directory), str(Path.cwd())]):
        return ""
    return (
        f"no module {where!r} can be found next to the campaign, in the current folder or on the Python path; "
        "check the spelling (or write a file path ending in .py), then run `cockpit check` again."
    )


def _module_found(name: str, first: list[str]) -> bool:
    """Whether module ``name`` exists, found without running it (the run puts the campaign folder and the
    current folder on its path, as here)."""
    import importlib.machinery
    import importlib.util
    import sys

    parts = [p for p in name.split(".") if p]
    if not parts:
        return False
    spec = importlib.machinery.PathFinder.find_spec(parts[0], [*first, *sys.path])
    if spec is None:
        try:  # an editable install has a finder of its own: the top-level package is enough then
            return importlib.util.find_spec(parts[0]) is not None
        except (ImportError, ValueError):
            return False
    for part in parts[1:]:
        locations = spec.submodule_search_locations
        if locations is None:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(locations))
        if spec is None:
            return False
    return True


def summary(nb: notebook.Notebook) -> list[str]:
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
