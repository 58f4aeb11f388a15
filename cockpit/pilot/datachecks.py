"""Data gates: what reaches the loss, identifiers, targets, masks, leakage, overfitting a tiny subset.

Each function fills a :class:`~cockpit.pilot.gates.Gate` with checks whose
details name the example ids concerned and what is wrong.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

import torch

from .train import Trainer, user

if TYPE_CHECKING:  # pragma: no cover
    from .gates import Gate, Pilot


def _ids(xs: list[Any], k: int = 5) -> str:
    shown = ", ".join(str(x) for x in xs[:k])
    return shown + (f" (+{len(xs) - k} more)" if len(xs) > k else "")


def data_gate(p: Pilot, g: Gate) -> None:
    task, splits, params = p.task, p.splits, p.params
    for name in ("train", "val"):
        g.check(f"{name} split", name in splits and len(splits[name]) > 0, f"{len(splits.get(name, []))} examples")
    if not splits.get("train"):
        return
    missing, all_ids = [], []
    for split, data in splits.items():
        for i, ex in enumerate(data):
            if not isinstance(ex, dict) or ex.get("id") in (None, ""):
                missing.append(f"{split}[{i}]")
            else:
                all_ids.append(ex["id"])
    dup = [i for i, c in Counter(all_ids).items() if c > 1]
    g.check("identifiers present", not missing, "every example has an id" if not missing else f"{len(missing)} without id: {_ids(missing)}")
    g.check("identifiers unique", not dup, f"{len(all_ids)} unique" if not dup else f"{len(dup)} duplicated: {_ids(dup)}")
    no_group = [ex.get("id") for data in splits.values() for ex in data if isinstance(ex, dict) and ex.get("group") in (None, "")]
    g.check("leakage group present", not no_group, f"every example names its {task.group_unit}" if not no_group else f"{len(no_group)} without group: {_ids(no_group)}")

    tr = p.trainer
    sample = list(splits["train"][: tr.microbatch])
    batch = user("collate", task.collate, sample, params)
    ids = batch.get("ids")
    g.check("batch carries ids", ids is not None and list(ids) == [e["id"] for e in sample],
            "ids in order" if ids is not None and list(ids) == [e["id"] for e in sample] else "collate must return 'ids' in the examples' order")
    lab = batch.get(task.label_key)
    g.check("targets present", torch.is_tensor(lab), f"batch[{task.label_key!r}] {tuple(lab.shape) if torch.is_tensor(lab) else 'missing'}")
    if not torch.is_tensor(lab):
        return
    g.check("targets per example", lab.shape[0] == len(sample), f"{lab.shape[0]} rows for {len(sample)} examples")
    inp = batch.get(task.input_key)
    if torch.is_tensor(inp):
        ml = p._max_length()
        if ml is not None:
            g.check("lengths within maximum", inp.shape[-1] <= ml, f"width {inp.shape[-1]} (max_length {ml})")
        if task.kind == "generation":
            mask = batch.get(task.mask_key)
            g.check("attention mask", torch.is_tensor(mask) and tuple(mask.shape) == tuple(inp.shape),
                    f"{task.mask_key} {tuple(mask.shape) if torch.is_tensor(mask) else 'missing'} vs inputs {tuple(inp.shape)}")
            g.check("targets aligned with inputs", tuple(lab.shape) == tuple(inp.shape), f"labels {tuple(lab.shape)} vs inputs {tuple(inp.shape)}")
    if task.kind == "classification" and task.label_names:
        bad = [(e["id"], int(t)) for e, t in zip(sample, lab.view(-1).tolist()) if not 0 <= int(t) < len(task.label_names)]
        g.check("targets in label mapping", not bad, f"{len(task.label_names)} classes" if not bad else f"out of range: {_ids(bad)}")


def leakage_gate(p: Pilot, g: Gate) -> None:
    splits = p.splits
    groups = {name: {ex.get("group") for ex in data} for name, data in splits.items()}
    names = list(groups)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            both = sorted(str(x) for x in groups[a] & groups[b])
            g.check(f"{a}/{b} disjoint", not both,
                    f"no {p.task.group_unit} shared" if not both else f"{len(both)} {p.task.group_unit}s in both: {_ids(both)}")


def initial_loss(p: Pilot, g: Gate, loss: float) -> None:
    task, params = p.task, p.params
    classes = None
    if task.kind == "classification" and task.label_names:
        classes = len(task.label_names)
    elif task.kind == "generation" and task.vocab_size:
        classes = int(task.vocab_size(params))
    if not classes or classes < 2:
        return
    uniform = math.log(classes)
    ok = 0.5 * uniform <= loss <= 2.0 * uniform
    g.check("initial loss near uniform", ok,
            f"{loss:.3f} vs ln {classes} = {uniform:.3f}" + ("" if ok else ": far from uniform predictions; check the output layer, its initialisation and the loss"),
            warn=True)


def overfit_gate(p: Pilot, g: Gate) -> None:
    """Train a fresh copy on N fixed examples: the loss must collapse and the targets come back."""
    cfg = p.pilot_cfg
    n = int(cfg.get("overfit_examples", 16))
    steps = int(cfg.get("overfit_steps", 60))
    ratio = float(cfg.get("overfit_loss_ratio", 0.1))
    base = p.trainer
    examples = list(base.splits["train"][:n])
    params = dict(base.params)
    params["lr"] = float(cfg.get("overfit_lr", max(float(params["lr"]), 1e-3)))
    params["schedule"] = "constant"
    params["warmup_updates"] = 0
    params["weight_decay"] = 0.0
    params["dropout"] = 0.0
    tr = Trainer(base.task, params, base.seed, base.device, splits={"train": examples, "val": examples})
    tr.microbatch = len(examples)
    tr.accumulation = 1
    tr.load_data()
    tr.build()
    losses = []
    for _ in range(steps):
        out = tr.update([examples])
        losses.append(out["loss"])
    g.inputs.update({"lr": params["lr"], "ids": [e["id"] for e in examples][:8]})
    finite = all(math.isfinite(x) for x in losses)
    g.check("finite throughout", finite, f"{steps} steps")
    first, last = losses[0], losses[-1]
    g.check("loss collapses", finite and last <= ratio * first,
            f"{first:.3f} -> {last:.3f} (must fall below {ratio:g}x the start); this proves the mechanics, not generalisation")
    if base.task.predict is not None:
        tr.model.eval()
        with torch.no_grad():
            batch = tr.collate(examples)
            pred = user("predict", base.task.predict, tr.model, batch)
        lab = batch[base.task.label_key]
        keep = lab != base.task.ignore_index
        right = (pred == lab) & keep
        per_row = right.view(len(examples), -1).sum(-1) == keep.view(len(examples), -1).sum(-1)
        wrong = [e["id"] for e, ok in zip(examples, per_row.tolist()) if not ok]
        acc = float(right.sum()) / max(float(keep.sum()), 1.0)
        g.check("targets recovered", acc >= 0.9, f"{acc:.0%} of targets" + (f"; wrong rows: {_ids(wrong)}" if wrong else ""))
    del tr  # the fresh copy was rebuilt from the task, never copied from the trained model
