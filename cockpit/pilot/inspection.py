"""``inspect.json``: a handful of examples exactly as the loss receives them, and the class counts.

Written by the data gate; read by ``cockpit inspect`` and the TUI's data screen.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections import Counter
from typing import TYPE_CHECKING, Any

import torch

from .. import fsutil, runs
from ..contract import Example
from ..schema import JSON, InspectDoc, InspectedExample
from .datascan import SplitScan, collate, rows

if TYPE_CHECKING:
    from .context import Context
    from .gate import Gate


def _jsonable(v: Any) -> JSON:
    if torch.is_tensor(v):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def rows_as_seen(ctx: Context, examples: list[Example], split: str) -> list[InspectedExample]:
    """The examples exactly as the loss receives them (collated together, as one microbatch)."""
    task = ctx.the_task
    if not examples:
        return []
    batch = collate(task, ctx.params, examples)
    out: list[InspectedExample] = []
    n = len(examples)
    for r, ex in enumerate(examples):
        row = {k: _jsonable(v[r]) for k, v in batch.items() if torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == n}
        text: JSON = None
        if task.decode is not None:
            try:
                dec = task.decode(batch, r)
                text = [[str(t), bool(sup)] for t, sup in dec] if isinstance(dec, (list, tuple)) else str(dec)
            except Exception as exc:  # noqa: BLE001 - a broken decoder is reported, not fatal
                print(
                    f"--- exception in the task's decode() while inspecting ---\n{traceback.format_exc()}",
                    file=sys.stderr,
                )
                text = f"(decode raised {type(exc).__name__}: {exc})"
        lab = batch.get(task.label_key)
        target: JSON = None
        label_name = None
        if task.kind == "classification" and torch.is_tensor(lab):
            target = int(rows(lab)[r, 0])
            if task.label_names and 0 <= target < len(task.label_names):
                label_name = task.label_names[target]
        elif isinstance(text, list):
            target = "".join(t for t, sup in text if sup)
        elif torch.is_tensor(lab):
            target = [x for x in rows(lab)[r].tolist() if x != task.ignore_index]
        out.append(
            {"split": split, "id": ex.get("id"), "row": row, "text": text, "target": target, "label_name": label_name}
        )
    return out


def _pair(counts: object) -> bool:
    """``extras["inspect_examples"]`` as (train, val) whole numbers; anything else falls back to (4, 2)."""
    return isinstance(counts, (tuple, list)) and len(counts) >= 2 and all(isinstance(c, int) for c in counts[:2])


def plain(obj: object) -> object:
    """What JSON cannot hold, as it reads best: a numpy or torch scalar (an id from pandas) as its value, the rest
    as text."""
    item = getattr(obj, "item", None)
    if callable(item) and getattr(obj, "ndim", 1) == 0:
        return item()
    return str(obj)


def write(ctx: Context, g: Gate, scans: dict[str, SplitScan]) -> None:
    task = ctx.the_task
    counts = task.extras.get("inspect_examples", (4, 2))
    n_train, n_val = (counts, counts) if isinstance(counts, int) else tuple(counts)[:2] if _pair(counts) else (4, 2)
    examples: list[InspectedExample] = []
    for split, n, size in (("train", n_train, ctx.trainer.microbatch), ("val", n_val, ctx.trainer.eval_microbatch)):
        chosen = list(ctx.trainer.splits.get(split, [])[: int(n)])
        for i in range(0, len(chosen), max(int(size), 1)):  # padded together as one microbatch of training would be
            examples += rows_as_seen(ctx, chosen[i : i + max(int(size), 1)], split)
    doc: InspectDoc = {"examples": examples}
    if task.kind == "classification":
        names = task.label_names
        doc["class_counts"] = {
            n: {
                (names[t] if names and 0 <= t < len(names) else str(t)): c
                for t, c in sorted(Counter(x for x in s.targets if x is not None).items())
            }
            for n, s in scans.items()
        }
        doc["label_names"] = list(names) if names else None
    # every rank of a distributed pilot writes it: each through a temporary of its own
    fsutil.write_text(ctx.rdir / runs.INSPECT_FILE, json.dumps(doc, indent=1, default=plain))
    g.extra["inspect"] = {"file": runs.INSPECT_FILE, "examples": len(examples)}
    if doc.get("class_counts"):
        g.extra["class_counts"] = doc["class_counts"]


def add_generated(ctx: Context) -> int:
    """Put the text the model now generates beside each inspected example's target (a task with ``generate``).

    Run by the validation phase, after the first updates: the data view then shows prompt, target
    and what the model generates side by side. Returns how many examples got a generated text.
    """
    tr = ctx.trainer
    path = ctx.rdir / runs.INSPECT_FILE
    if tr.task.generate is None or not fsutil.is_regular(path):
        return 0
    doc = json.loads(fsutil.read_regular(path, 64 << 20))
    entries = [e for e in doc.get("examples", []) if isinstance(e, dict)]
    done = 0
    for split in ("train", "val"):
        mine = [e for e in entries if e.get("split") == split]
        chosen = list(tr.splits.get(split, [])[: len(mine)])
        if not mine or not chosen:
            continue
        texts = tr.generated(tr.collate(chosen)) or []
        by_id = {str(ex.get("id")): t for ex, t in zip(chosen, texts, strict=False)}
        for e in mine:
            if str(e.get("id")) in by_id:
                e["generated"] = by_id[str(e.get("id"))]
                e["generated_step"] = tr.step
                done += 1
    fsutil.write_text(path, json.dumps(doc, indent=1, default=plain))
    return done
