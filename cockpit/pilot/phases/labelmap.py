"""Classification targets against the label names: one id per name, the same mapping in every split, each
example's own label name equal to ``label_names[target]``, every class present in training (the data gate).

Targets come in three layouts, told apart by measuring the collated labels (``layout``): one class id per example
(a classifier), a class id per position (token classification with -100 on word pieces, a segmentation map of
(B, H, W)), or a float multi-hot row per example (multi-label with BCE). The split scan records one target per
example; for the two dense layouts ``dense_targets`` reads every position: which classes training contains and
which values fall outside the classes.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...contract import Example
from ..context import Context
from ..datascan import SplitScan, collate, ids_text
from ..gate import Gate
from ..trainer import user


def layout(task: Any, lab: Any) -> str:
    """How a batch's targets are laid out: "example" (one class id each), "position" (a class id per position)
    or "multi-hot" (a float row of one value per label name)."""
    if not torch.is_tensor(lab) or lab.dim() == 0 or lab[0].numel() <= 1:
        return "example"
    names = task.label_names or []
    if lab.is_floating_point():
        return "multi-hot" if lab.dim() == 2 and names and lab.shape[1] == len(names) else "example"
    return "position"


def dense_targets(
    ctx: Context, scans: dict[str, SplitScan], splits: Mapping[str, Sequence[Example]], kind: str, budget: float
) -> tuple[Counter[int], str]:
    """For per-position or multi-hot targets: replace each scan's range problems (measured at every position,
    not the first) and count, per class, the training examples that contain it. Returns the counts and, when
    the collating budget ran out, what part of the training split they cover ("" when all of it)."""
    task = ctx.the_task
    names = task.label_names
    classes = len(names) if names else None
    mb = max(int(ctx.params.get("microbatch", 8)), 1)
    counts: Counter[int] = Counter()
    partial = ""
    for sname, s in scans.items():
        data = [splits[sname][i] for i in range(len(s.ids))]
        bad: list[str] = []
        values: set[str] = set()
        for start in range(0, len(data), mb):
            if time.monotonic() > budget:
                partial = partial or (f"the first {start} training examples" if sname == "train" else "")
                break
            chunk = data[start : start + mb]
            lab = collate(task, ctx.params, chunk).get(task.label_key)
            if not torch.is_tensor(lab) or lab.shape[0] != len(chunk):
                break
            flat = lab.reshape(len(chunk), -1)
            if kind == "multi-hot":
                out = ((flat < 0) | (flat > 1)) & (flat != task.ignore_index)
                present = [set(torch.nonzero(r > 0).flatten().tolist()) for r in flat]
            else:
                kept = flat != task.ignore_index
                out = kept & (flat < 0)
                if classes is not None:
                    out |= kept & (flat >= classes)
                present = [set(r[k].tolist()) for r, k in zip(flat, kept, strict=True)]
            for e_id, o, row, cls in zip(s.ids[start:], out, flat, present, strict=False):
                if bool(o.any()):
                    bad.append(f"{e_id} (target {row[o][0].item():g} at {int(o.sum())} positions)")
                    values.update(f"{v:g}" for v in row[o].unique()[:8].tolist())
                if sname == "train":
                    counts.update(cls)
        s.problems["range"] = bad
        s.problems["range_values"] = sorted(values)  # the values outside the classes, for the verdict's wording
    return counts, partial


def label_checks(
    ctx: Context, g: Gate, scans: dict[str, SplitScan], dense: tuple[Counter[int], str] | None = None
) -> None:
    task = ctx.the_task
    names = task.label_names
    field_name = task.extras.get("label_field", "label")
    problems: list[str] = []
    if names:
        seen: dict[str, list[int]] = defaultdict(list)
        for i, n in enumerate(names):
            seen[n].append(i)
        problems += [
            f"label_names gives {n!r} to ids {', '.join(map(str, ids))}" for n, ids in seen.items() if len(ids) > 1
        ]
    for sname, s in scans.items():
        for name, by_id in s.mapping.items():
            if len(by_id) > 1:
                problems.append(
                    f"{sname}: {name!r} maps to targets "
                    + ", ".join(f"{t} ({ids_text(ids, 2)})" for t, ids in sorted(by_id.items()))
                )
        by_target: dict[int, list[str]] = defaultdict(list)
        for name, by_id in s.mapping.items():
            for t in by_id:
                by_target[t].append(name)
        for t, ns in sorted(by_target.items()):
            if len(ns) > 1:
                problems.append(
                    f"{sname}: target {t} stands for "
                    + ", ".join(f"{n!r} ({ids_text(s.mapping[n][t], 2)})" for n in sorted(ns))
                )
    g.check(
        "label mapping one-to-one",
        not problems,
        (f"{len(names)} names, one id each" if names else "no label_names")
        if not problems
        else "; ".join(problems[:4]) + ("; …" if len(problems) > 4 else ""),
    )

    # the mapping each split reveals, and per-split label lists, must agree
    differ: list[str] = []
    per_split = task.extras.get("label_names_by_split")
    if callable(per_split):
        per_split = user("label_names_by_split", per_split, ctx.params)
    if isinstance(per_split, dict):
        for sname, lst in per_split.items():
            if names is not None and list(lst) != list(names):
                diff = [f"{i}: {a!r} vs {b!r}" for i, (a, b) in enumerate(zip(lst, names, strict=False)) if a != b]
                if len(lst) != len(names):
                    diff.append(f"{len(lst)} names vs {len(names)}")
                differ.append(f"{sname}'s label names differ from the task's ({', '.join(diff[:3])})")
    ref = scans.get("train")
    if ref is not None:
        ref_map = {n: min(by_id) for n, by_id in ref.mapping.items()}
        for sname, s in scans.items():
            if sname == "train":
                continue
            for name, by_id in s.mapping.items():
                t = min(by_id)
                if name in ref_map and ref_map[name] != t:
                    differ.append(
                        f"{sname} maps {name!r} to {t} ({ids_text(by_id[t], 2)}) but train maps it to "
                        f"{ref_map[name]} ({ids_text(ref.mapping[name][ref_map[name]], 2)})"
                    )
    g.check(
        "label mapping same in every split",
        not differ,
        "train, val and test map each label name to the same id"
        if not differ
        else "; ".join(differ[:4]) + ("; …" if len(differ) > 4 else ""),
    )

    if names:
        wrong: list[tuple[str, int, Any]] = []
        pairs: Counter[tuple[str, int]] = Counter()
        for s in scans.values():
            for name, by_id in s.mapping.items():
                for t, ids in by_id.items():
                    if 0 <= t < len(names) and names[t] != name:
                        pairs[(name, t)] += len(ids)
                        wrong.extend((name, t, i) for i in ids)
        if any(s.mapping for s in scans.values()):
            mapping = ", ".join(f"{n!r} -> {t} ({names[t]!r})" for (n, t), _ in pairs.most_common(4))
            g.check(
                "targets match label names",
                not wrong,
                f"every example's {field_name!r} equals label_names[target]"
                if not wrong
                else f"{len(wrong)} examples whose {field_name!r} is not label_names[target]: "
                + ids_text([f"{i} is {n!r} but target {t} is {names[t]!r}" for n, t, i in wrong], 3)
                + f"; the collate maps {mapping}: fix the label -> id mapping or label_names",
            )
        if dense is not None:  # per-position or multi-hot: the examples containing each class
            counts, partial = dense
        else:
            counts = Counter(t for t in scans["train"].targets if t is not None) if "train" in scans else Counter()
            partial = ""
        absent = [n for i, n in enumerate(names) if counts.get(i, 0) == 0]
        where = f" (in {partial})" if partial else ""
        g.check(
            "every class in train",
            not absent,
            f"{len(names)} classes, the rarest in {min(counts.get(i, 0) for i in range(len(names)))} train examples"
            + where
            if not absent
            else f"no training example of {', '.join(map(repr, absent))}{where}",
            warn=True,
        )
