"""``cockpit batch``: examples per update, updates for a budget, and what a change moves.

Either from numbers (``cockpit batch --micro 2 --accum 8 --examples 3200``) or
from a campaign (``cockpit batch campaigns/demo``: the reference and every
variant). The counts come from ``cockpit.arithmetic``, the one module the TUI
and the rental plan use too. They predict neither duration nor quality.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, TypedDict

from .. import arithmetic, notebook
from ..arithmetic import HELD, BatchPlan, Budget
from ..errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "campaign",
        nargs="?",
        help="a campaign folder or campaign.toml: show its reference and variants",
    )
    g = parser.add_argument_group("the batch")
    g.add_argument("--micro", type=int, metavar="N", help="microbatch: examples per forward pass")
    g.add_argument("--accum", type=int, default=1, metavar="N", help="gradient accumulation steps (1)")
    g.add_argument("--replicas", type=int, default=1, metavar="N", help="data-parallel replicas (1)")
    g.add_argument(
        "--model-parallel",
        type=int,
        default=1,
        metavar="N",
        help="GPUs that split one model (tensor/pipeline); does not multiply the batch (1)",
    )
    g.add_argument("--dataset-size", type=int, metavar="N", help="training examples in one epoch")
    g.add_argument(
        "--keep-last",
        action="store_true",
        help="keep the incomplete last batch of an epoch (default: drop it)",
    )
    b = parser.add_argument_group("the budget (one of)")
    one = b.add_mutually_exclusive_group()
    one.add_argument("--updates", type=int, metavar="N", help="optimizer updates")
    one.add_argument("--epochs", type=float, metavar="X", help="passes over the dataset")
    one.add_argument("--examples", type=int, metavar="N", help="training examples seen")
    c = parser.add_argument_group("a change to compare against the batch above")
    c.add_argument(
        "--held",
        choices=HELD,
        help="what the comparison holds constant (default: the quantity the budget is given in)",
    )
    c.add_argument("--vs-micro", type=int, metavar="N", help="the changed microbatch")
    c.add_argument("--vs-accum", type=int, metavar="N", help="the changed accumulation")
    c.add_argument("--vs-replicas", type=int, metavar="N", help="the changed data replicas")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    if args.campaign is not None:
        given = [
            flag
            for flag, value in (
                ("--micro", args.micro),
                ("--updates", args.updates),
                ("--epochs", args.epochs),
                ("--examples", args.examples),
                ("--vs-micro", args.vs_micro),
                ("--vs-accum", args.vs_accum),
                ("--vs-replicas", args.vs_replicas),
                ("--dataset-size", args.dataset_size),
            )
            if value is not None
        ]
        if given:
            raise UsageError(
                f"give either a campaign or numbers, not both ({', '.join(given)} with "
                f"{args.campaign}); the campaign's numbers are in its [batch] section."
            )
        result = from_campaign(notebook.load(args.campaign))
    else:
        result = from_numbers(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        from ..termout import console, print_lines

        print_lines(console(), _text(result))
    return 0


# --------------------------------------------------------------------------- building


# --------------------------------------------------------------------------- what `--json` prints


class BudgetRecord(TypedDict):
    updates: int
    examples_seen: int
    epochs_seen: float | None
    incomplete_dropped: int
    basis: str
    amount: float


class _EntryRequired(TypedDict):
    label: str  # "batch", "changed", or the variant's id
    microbatch: int
    accumulation: int
    data_replicas: int
    model_parallel: int
    dataset_size: int | None
    drop_last: bool
    examples_per_update: int
    gpus: int


class BatchEntry(_EntryRequired, total=False):
    updates_per_epoch: int  # with a dataset size
    examples_per_epoch: int
    budget: BudgetRecord  # with a budget
    rows: list[tuple[str, str]]  # the figures as the text shows them
    changes: dict[str, object]  # a variant: the batch settings it changes
    what_changes: str


class _ResultRequired(TypedDict):
    reference: BatchEntry
    variants: list[BatchEntry]


class BatchResult(_ResultRequired, total=False):
    campaign: str  # from a campaign
    file: str
    held: str  # what a comparison holds constant
    caveat: str


def _plan(**kw: Any) -> BatchPlan:
    try:
        return BatchPlan(**kw)
    except ValueError as exc:
        raise UsageError(f"{exc}; every batch factor is a whole number >= 1.") from None


def _resolve(plan: BatchPlan, **budget: Any) -> Budget | None:
    if all(v is None for v in budget.values()):
        return None
    try:
        return arithmetic.resolve_budget(plan, **budget)
    except ValueError as exc:
        if "dataset_size" in str(exc):
            raise UsageError("a budget in epochs needs the dataset size: add --dataset-size N.") from None
        raise UsageError(f"{exc}.") from None


def plan_entry(label: str, plan: BatchPlan, budget: Budget | None) -> BatchEntry:
    entry: BatchEntry = {
        "label": label,
        "microbatch": plan.microbatch,
        "accumulation": plan.accumulation,
        "data_replicas": plan.data_replicas,
        "model_parallel": plan.model_parallel,
        "dataset_size": plan.dataset_size,
        "drop_last": plan.drop_last,
        "examples_per_update": plan.examples_per_update,
        "gpus": plan.gpus,
    }
    if plan.dataset_size:
        entry["updates_per_epoch"] = plan.updates_per_epoch()
        entry["examples_per_epoch"] = plan.examples_per_epoch()
    if budget is not None:
        entry["budget"] = {
            "updates": budget.updates,
            "examples_seen": budget.examples_seen,
            "epochs_seen": budget.epochs_seen,
            "incomplete_dropped": budget.incomplete_dropped,
            "basis": budget.basis,
            "amount": budget.amount,
        }
    entry["rows"] = arithmetic.describe(plan, budget)
    return entry


def from_numbers(args: argparse.Namespace) -> BatchResult:
    if args.micro is None:
        raise UsageError(
            "give the microbatch (--micro N), or a campaign: for example "
            "`cockpit batch --micro 2 --accum 8 --examples 3200` or `cockpit batch campaigns/demo`."
        )
    for flag, value in _flags(args):
        if value is not None and value < 1:
            raise UsageError(f"{flag} is {value}; it must be a whole number >= 1.")
    for flag, value in (
        ("--updates", args.updates),
        ("--epochs", args.epochs),
        ("--examples", args.examples),
    ):
        if value is not None and value < 0:
            raise UsageError(f"{flag} is {value:g}; a budget cannot be negative.")
    plan = _plan(
        microbatch=args.micro,
        accumulation=args.accum,
        data_replicas=args.replicas,
        model_parallel=args.model_parallel,
        dataset_size=args.dataset_size,
        drop_last=not args.keep_last,
    )
    budget = _resolve(plan, updates=args.updates, epochs=args.epochs, examples=args.examples)
    result: BatchResult = {"reference": plan_entry("batch", plan, budget), "variants": []}
    changed: dict[str, object] = {
        "microbatch": args.vs_micro,
        "accumulation": args.vs_accum,
        "data_replicas": args.vs_replicas,
    }
    changed = {k: v for k, v in changed.items() if v is not None}
    if changed:
        held = args.held or (budget.basis if budget else "updates")
        if budget is None:
            raise UsageError("a comparison needs a budget to hold: add --updates, --epochs or --examples.")
        result["held"] = held
        result["variants"].append(_variant("changed", plan, budget, held, changed))
    elif args.held:
        raise UsageError("--held compares a change: add --vs-micro, --vs-accum or --vs-replicas.")
    result["caveat"] = arithmetic.CAVEAT
    return result


def _flags(args: argparse.Namespace) -> list[tuple[str, int | None]]:
    return [
        ("--micro", args.micro),
        ("--accum", args.accum),
        ("--replicas", args.replicas),
        ("--model-parallel", args.model_parallel),
        ("--dataset-size", args.dataset_size),
        ("--vs-micro", args.vs_micro),
        ("--vs-accum", args.vs_accum),
        ("--vs-replicas", args.vs_replicas),
    ]


def _variant(label: str, ref: BatchPlan, ref_budget: Budget, held: str, changed: dict[str, object]) -> BatchEntry:
    plan = _plan(**{**dataclasses.asdict(ref), **changed})
    if held == "epochs" and not (ref_budget.epochs_seen is not None and plan.dataset_size):
        raise UsageError("holding epochs constant needs the dataset size: add --dataset-size N.")
    budget = arithmetic.hold(held, plan, ref_budget)
    entry = plan_entry(label, plan, budget)
    entry["changes"] = changed
    entry["what_changes"] = arithmetic.what_changes(held, ref, plan, ref_budget)
    return entry


def from_campaign(nb: notebook.Notebook) -> BatchResult:
    held = nb.campaign.held_constant
    ref = nb.reference
    ref_params = nb.params(ref.id)
    ref_plan = arithmetic.plan_from(ref_params)
    try:
        ref_budget: Budget | None = arithmetic.budget_from(ref_plan, ref_params)
    except ValueError:
        ref_budget = None  # epochs without a dataset size: the task knows it, not the file
    result: BatchResult = {
        "campaign": nb.campaign.name,
        "file": str(nb.path),
        "held": held,
        "reference": plan_entry(ref.id, ref_plan, ref_budget),
        "variants": [],
    }
    for v in nb.variants:
        if v is ref:
            continue
        params = nb.params(v.id)
        plan = arithmetic.plan_from(params)
        changed: dict[str, object] = {k: v.set[k] for k in v.set if k in _BATCH_KEYS}
        if ref_budget is None:
            entry = plan_entry(v.id, plan, None)
            entry["what_changes"] = "updates unknown until the task gives the dataset size"
        elif any(k in v.set for k in HELD):
            entry = plan_entry(v.id, plan, arithmetic.budget_from(plan, params))
            entry["what_changes"] = f"sets its own budget although the campaign holds {held} constant"
        elif held == "epochs" and not plan.dataset_size:
            entry = plan_entry(v.id, plan, None)
            entry["what_changes"] = arithmetic.what_changes(held, ref_plan, plan, ref_budget)
        else:
            entry = plan_entry(v.id, plan, arithmetic.hold(held, plan, ref_budget))
            entry["what_changes"] = arithmetic.what_changes(held, ref_plan, plan, ref_budget)
        entry["changes"] = changed
        result["variants"].append(entry)
    result["caveat"] = arithmetic.CAVEAT
    return result


_BATCH_KEYS = {f.name for f in dataclasses.fields(notebook.BatchSpec)}


# --------------------------------------------------------------------------- text


def _text(result: BatchResult) -> list[str]:
    out: list[str] = []
    if "campaign" in result:
        out.append(f"Campaign {result['campaign']} ({result['file']}), holding {result['held']} constant.")
        out.append("")
    ref = result["reference"]
    title = "Reference " + ref["label"] if "campaign" in result else "Batch"
    out += [f"{title}:", *_rows(ref["rows"])]
    for v in result["variants"]:
        out.append("")
        if v["changes"]:
            what = ", ".join(f"{k} {val}" for k, val in v["changes"].items())
        else:
            what = "no batch change"
        name = f"Variant {v['label']}" if "campaign" in result else "Changed"
        out += [f"{name} ({what}):", *_rows(v["rows"])]
        out.append(f"  what changes: {v['what_changes']}")
    out += ["", result["caveat"]]
    return out


def _rows(rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows)
    return [f"  {k:<{width}}  {v}" for k, v in rows]
