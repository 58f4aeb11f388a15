"""Leakage: no group (conversation, patient, document, period) in two splits; no input repeated across splits."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ... import events as ev
from ..context import Context
from ..datascan import SplitScan, ids_text
from ..gate import Gate, Phase

PERIOD_UNITS = ("period", "date", "day", "week", "month", "quarter", "year", "time")


def run(ctx: Context, g: Gate) -> None:
    task, splits = ctx.the_task, ctx.trainer.splits
    unit = task.group_unit
    members: dict[str, dict[Any, list[Any]]] = {}
    for name, data in splits.items():
        m: dict[Any, list[Any]] = defaultdict(list)
        for ex in data:
            # an example without a group is its own (as the task contract says): it can share nothing
            if isinstance(ex, dict) and ex.get("group") not in (None, ""):
                m[_hashable(ex.get("group"))].append(ex.get("id"))
        members[name] = m
    names = list(members)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            both = sorted(set(members[a]) & set(members[b]), key=str)
            if not both:
                g.check(
                    f"{a}/{b} disjoint", True, f"no {unit} in both ({len(members[a])} and {len(members[b])} {unit}s)"
                )
                continue
            na = sum(len(members[a][x]) for x in both)
            nb = sum(len(members[b][x]) for x in both)
            shown = ids_text(
                [f"{x!s} ({a} {ids_text(members[a][x], 2)}; {b} {ids_text(members[b][x], 2)})" for x in both], 3
            )
            g.check(
                f"{a}/{b} disjoint",
                False,
                f"{len(both)} {unit}s in both {a} and {b} ({na} {a} examples, {nb} {b} examples): {shown}; "
                f"split by {unit} so each one lands in a single split",
            )
    if task.extras.get("ordered_groups") or unit.lower() in PERIOD_UNITS:
        _period_order(g, members, unit)
    _identical_inputs(ctx, g)


def _hashable(x: Any) -> Any:
    try:
        hash(x)
        return x
    except TypeError:
        return repr(x)


def _period_order(g: Gate, members: dict[str, dict[Any, list[Any]]], unit: str) -> None:
    train = [x for x in members.get("train", {}) if x not in (None, "")]
    if not train:
        return
    try:
        last = max(train)
    except TypeError:
        g.check(
            f"{unit}s sortable",
            False,
            f"the {unit} values cannot be compared ({ids_text(sorted(map(str, train)), 3)}): use ISO dates or numbers",
        )
        return
    for name in ("val", "test"):
        if name not in members:
            continue
        groups = [x for x in members[name] if x not in (None, "")]
        try:
            early = sorted(x for x in groups if not x > last)
        except TypeError:
            g.check(f"{name} after train", False, f"{name}'s {unit} values cannot be compared with train's")
            continue
        n_ex = sum(len(members[name][x]) for x in early)
        g.check(
            f"{name} after train",
            not early,
            f"every {name} {unit} after the last train {unit} {last}"
            if not early
            else f"{len(early)} {name} {unit}s ({n_ex} examples) are not after the last train {unit} {last}: "
            + ids_text([f"{x} ({ids_text(members[name][x], 2)})" for x in early], 3)
            + f"; validate and test on {unit}s after training's, as the model will be used",
        )


def _identical_inputs(ctx: Context, g: Gate) -> None:
    scans: dict[str, SplitScan] = ctx.scans
    by_split: dict[str, dict[int, list[Any]]] = {}
    for name, s in scans.items():
        if len(s.inputs) != len(s.ids):
            return
        m: dict[int, list[Any]] = defaultdict(list)
        for i, h in zip(s.ids, s.inputs, strict=True):
            m[h].append(i)
        by_split[name] = m
    if not by_split:
        return
    names = list(by_split)
    found: list[str] = []
    count = 0
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            common = set(by_split[a]) & set(by_split[b])
            count += sum(len(by_split[b][h]) for h in common)
            found += [f"{by_split[a][h][0]} = {by_split[b][h][0]}" for h in list(common)[:3]]
    g.check(
        "no identical inputs across splits",
        not count,
        "no input appears in two splits"
        if not count
        else f"{count} examples repeat an input of another split: {ids_text(found, 4)}; "
        "remove the duplicates or keep them in one split",
        warn=True,
    )


def inputs(ctx: Context) -> dict[str, ev.JSON]:
    return {"group_unit": ctx.the_task.group_unit}


PHASE = Phase(
    "leakage",
    run,
    remedy="split by the task's group unit so no group appears in two splits",
    checks=(
        "<a>/<b> disjoint",
        "<unit>s sortable",
        "val after train",
        "test after train",
        "no identical inputs across splits",
    ),
    independent=True,
    inputs=inputs,
    doc="splits disjoint by the task's group unit",
)
