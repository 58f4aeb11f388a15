"""Data gates: what reaches the loss, identifiers, targets, masks, leakage, overfitting a tiny subset.

Each function fills a :class:`~cockpit.pilot.gates.Gate` with checks whose
details name the example ids concerned and what is wrong, so a user sees from
``cockpit pilot`` alone which examples to look at and what to fix.

The data gate collates every split in chunks, exactly as training does, and
checks every row (at most ``SCAN_LIMIT`` examples per split and ``scan_seconds``
of collating in all; the gate says when it stopped short): identifiers,
targets against the label mapping or the vocabulary, lengths against the
maximum, padding and instruction tokens that count in the loss, examples
left with no supervised token, microbatches where every position is ignored.
It writes ``inspect.json`` in the run folder: a handful of examples as the
loss receives them, and the class counts per split.

Optional task hooks read here (through ``Task.extras``):

``label_field``           example field holding the label *name* (default ``"label"``): when an
                          example carries it, its name must equal ``label_names[target]``, and
                          the name -> id mapping it reveals must be one-to-one and the same in
                          every split (a swapped mapping is caught here)
``label_names_by_split``  ``{split: [names]}`` (or a function of the params returning it) when
                          each split ships its own label list: every list must equal ``label_names``
``inspect_examples``      ``(train, val)`` how many examples ``inspect.json`` records (default (4, 2))
``max_no_target_share``   share of training examples allowed to have no supervised token (default 0)
``scan_seconds``          time budget for collating the splits in the data gate (default 30 s)
``ordered_groups``        True when the group is a period (also implied by ``group_unit`` "period"):
                          validation and test groups must come after every training group
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .train import Trainer, UserCodeError, rng_state, set_rng_state, user

if TYPE_CHECKING:  # pragma: no cover
    from .gates import Gate, Pilot

INSPECT_FILE = "inspect.json"
CHUNK = 256  # examples per collate call while scanning a split
SCAN_LIMIT = 50_000  # examples scanned per split; beyond that the gate says it stopped short
SCAN_SECONDS = 30.0  # collating budget for all splits together (Task.extras["scan_seconds"])
PERIOD_UNITS = ("period", "date", "day", "week", "month", "quarter", "year", "time")


def _ids(xs: list[Any], k: int = 5) -> str:
    shown = ", ".join(str(x) for x in xs[:k])
    return shown + (f" (+{len(xs) - k} more)" if len(xs) > k else "")


def _share(n: int, total: int) -> str:
    return f"{n} of {total} ({100.0 * n / max(total, 1):.1f}%)"


def _rows(t: torch.Tensor) -> torch.Tensor:
    """A per-row view: [B] stays [B, 1], [B, ...] becomes [B, -1]."""
    return t.reshape(t.shape[0], -1)


@dataclass
class SplitScan:
    """What the data gate learned about every scanned row of one split."""

    name: str
    total: int
    ids: list[Any] = field(default_factory=list)
    supervised: list[int] = field(default_factory=list)  # supervised positions per row
    inputs: list[int] = field(default_factory=list)  # hash of the input tokens (attended, not targets)
    targets: list[int | None] = field(default_factory=list)  # classification: the target id
    problems: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lost: list[Any] = field(default_factory=list)  # ids that lose target tokens to max_length
    longer: list[Any] = field(default_factory=list)  # ids longer than max_length before cropping
    lost_known: bool = True
    masked_rows: bool = False  # labels aligned with an attention mask: the padding check applies
    mapping: dict[str, dict[int, list[Any]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))


# --------------------------------------------------------------------------- data gate


def data_gate(p: Pilot, g: Gate) -> None:
    task, splits = p.task, p.splits
    for name in ("train", "val"):
        g.check(f"{name} split", name in splits and len(splits[name]) > 0, f"{len(splits.get(name, []))} examples")
    if not splits.get("train"):
        return
    _identifier_checks(p, g)
    ml = p._max_length()
    budget = time.monotonic() + float(task.extras.get("scan_seconds", SCAN_SECONDS))
    order = ["train", *(n for n in splits if n != "train")]  # the training split first: it matters most
    scans = {name: _scan(p, name, list(splits[name]), ml, budget) for name in order if len(splits.get(name, []))}
    p.data_scans = scans  # the leakage and overfit gates reuse what was learned here
    _batch_checks(p, g, scans, ml)
    if task.kind == "classification":
        _label_checks(p, g, scans)
    if task.kind == "generation":
        _truncation_checks(p, g, scans["train"], ml)
    _ignored_batches(p, g, scans["train"])
    g.inputs["scanned"] = ", ".join(f"{len(s.ids)}/{s.total} {n}" if len(s.ids) < s.total else f"{s.total} {n}"
                                    for n, s in scans.items())
    _write_inspect(p, g, scans)


def _identifier_checks(p: Pilot, g: Gate) -> None:
    task = p.task
    missing: list[str] = []
    where: dict[Any, list[str]] = defaultdict(list)
    no_group: list[Any] = []
    for split, data in p.splits.items():
        for i, ex in enumerate(data):
            if not isinstance(ex, dict) or ex.get("id") in (None, ""):
                missing.append(f"{split}[{i}]")
                continue
            try:
                where[ex["id"]].append(f"{split}[{i}]")
            except TypeError:  # unhashable id
                missing.append(f"{split}[{i}] (id {type(ex['id']).__name__} is not hashable)")
                continue
            if ex.get("group") in (None, ""):
                no_group.append(ex["id"])
    dup = [(k, v) for k, v in where.items() if len(v) > 1]
    g.check("identifiers present", not missing,
            f"every example of {len(where)} has an id" if not missing
            else f"{len(missing)} examples without an id: {_ids(missing)}; give every example a unique 'id'")
    g.check("identifiers unique", not dup,
            f"{len(where)} unique ids across splits" if not dup
            else f"{len(dup)} ids used more than once: "
            + _ids([f"{k!r} at {' and '.join(v[:3])}" for k, v in dup], 4)
            + "; ids must be unique across train, val and test")
    g.check("leakage group present", not no_group,
            f"every example names its {task.group_unit}" if not no_group
            else f"{len(no_group)} examples without a 'group' ({task.group_unit}): {_ids(no_group)}")


def _collate(p: Pilot, examples: list[dict[str, Any]], params: dict[str, Any] | None = None) -> dict[str, Any]:
    batch = user("collate", p.task.collate, examples, params if params is not None else p.params)
    if not isinstance(batch, dict):
        raise UserCodeError("collate", TypeError(f"must return a dict of tensors and 'ids', got {type(batch).__name__}"))
    return {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in batch.items()}


def _scan(p: Pilot, split: str, data: list[dict[str, Any]], ml: int | None, budget: float) -> SplitScan:
    task = p.task
    s = SplitScan(split, len(data))
    data = data[:SCAN_LIMIT]
    ign = task.ignore_index
    classes = len(task.label_names) if task.label_names else None
    vocab = int(user("vocab_size", task.vocab_size, p.params)) if task.vocab_size else None
    field_name = task.extras.get("label_field", "label")
    for start in range(0, len(data), CHUNK):
        if start and time.monotonic() > budget:
            break  # out of time: the checks say how many rows they saw
        chunk = [e for e in data[start : start + CHUNK] if isinstance(e, dict)]
        if not chunk:
            continue
        batch = _collate(p, chunk)
        want = [e.get("id") for e in chunk]
        got = batch.get("ids")
        if got is None or list(got) != want:
            s.problems["ids"].append(
                f"{split}[{start}:{start + len(chunk)}]: " + ("no 'ids' in the batch" if got is None
                                                            else f"ids {_ids(list(got), 3)} for examples {_ids(want, 3)}"))
        lab = batch.get(task.label_key)
        if not torch.is_tensor(lab):
            s.problems["targets"].append(f"batch[{task.label_key!r}] is {'missing' if lab is None else type(lab).__name__}")
            break
        if lab.dim() == 0 or lab.shape[0] != len(chunk):
            s.problems["rows"].append(f"{split}[{start}:]: {tuple(lab.shape)} targets for {len(chunk)} examples")
            break
        inp = batch.get(task.input_key)
        mask = batch.get(task.mask_key)
        inp = inp if torch.is_tensor(inp) and inp.dim() >= 1 and inp.shape[0] == len(chunk) else None
        if mask is not None and (not torch.is_tensor(mask) or inp is None or tuple(mask.shape) != tuple(inp.shape)):
            s.problems["mask"].append(f"{task.mask_key} {tuple(mask.shape) if torch.is_tensor(mask) else type(mask).__name__}"
                                      f" vs inputs {tuple(inp.shape) if inp is not None else 'missing'}")
            mask = None
        sup = _rows(lab != ign)
        n_sup = sup.sum(1).tolist()
        s.ids.extend(want)
        s.supervised.extend(int(x) for x in n_sup)
        aligned = inp is not None and lab.dim() >= 2 and tuple(lab.shape) == tuple(inp.shape)
        if task.kind == "generation" and inp is not None and not aligned:
            s.problems["aligned"].append(f"{split}[{start}:]: labels {tuple(lab.shape)} vs inputs {tuple(inp.shape)}")
        # lengths after collate
        if inp is not None and ml is not None and inp.dim() >= 2:
            lens = (_rows(mask).sum(1) if mask is not None else torch.full((len(chunk),), inp.shape[1])).tolist()
            for e, n in zip(chunk, lens, strict=True):
                if n > ml:
                    s.problems["length"].append(f"{e['id']} ({int(n)})")
            if inp.shape[1] > ml and not any(n > ml for n in lens):
                s.problems["length"].append(f"{split}[{start}:] padded to width {inp.shape[1]}")
        # padding and instruction positions that count
        if mask is not None and aligned:
            s.masked_rows = True
            pad = _rows((mask == 0) & (lab != ign)).sum(1).tolist()
            for e, n in zip(chunk, pad, strict=True):
                if n:
                    s.problems["padding"].append(f"{e['id']} ({int(n)} positions)")
        if task.kind == "generation" and task.instruction_is_input and aligned:
            lm = batch.get(task.loss_mask_key) if task.loss_mask_key else None
            if torch.is_tensor(lm) and tuple(lm.shape) == tuple(lab.shape):
                bad = _rows((lab != ign) & (lm == 0)).sum(1).tolist()
                for e, n in zip(chunk, bad, strict=True):
                    if n:
                        s.problems["instruction"].append(f"{e['id']} ({int(n)} positions)")
            elif task.loss_mask_key:
                s.problems["loss_mask"].append(f"batch[{task.loss_mask_key!r}] is "
                                               f"{tuple(lm.shape) if torch.is_tensor(lm) else 'missing'}, labels {tuple(lab.shape)}")
            att = _rows(mask != 0) if mask is not None else torch.ones_like(_rows(lab), dtype=torch.bool)
            # an instruction that is input only leaves attended positions that do not count
            masked_in = _rows(lab == ign).logical_and(att).sum(1).tolist()
            for e, n, k in zip(chunk, masked_in, n_sup, strict=True):
                if n == 0 and k > 0:
                    s.problems["all_supervised"].append(str(e["id"]))
        # targets in range
        if task.kind == "classification":
            flat = lab.reshape(len(chunk), -1)[:, 0].tolist() if lab.dim() >= 1 else []
            for e, t in zip(chunk, flat, strict=True):
                t = int(t)
                if t == ign:
                    s.targets.append(None)
                    continue
                s.targets.append(t)
                if t < 0 or (classes is not None and t >= classes):
                    s.problems["range"].append(f"{e['id']} (target {t})")
                name = e.get(field_name)
                if isinstance(name, str):
                    s.mapping[name][t].append(e["id"])
                elif isinstance(name, int) and not isinstance(name, bool) and name != t:
                    s.problems["field"].append(f"{e['id']} ({field_name} {name}, target {t})")
        elif vocab is not None:
            bad = _rows((lab != ign) & ((lab < 0) | (lab >= vocab))).any(1).tolist()
            for e, b, row in zip(chunk, bad, _rows(lab).tolist(), strict=True):
                if b:
                    s.problems["range"].append(f"{e['id']} (label {next(x for x in row if x != ign and not 0 <= x < vocab)})")
            if inp is not None:
                bad_in = _rows((inp < 0) | (inp >= vocab)).any(1).tolist()
                for e, b in zip(chunk, bad_in, strict=True):
                    if b:
                        s.problems["input_range"].append(str(e["id"]))
        # input identity for the leakage gate: attended tokens that are not targets
        if inp is not None:
            s.inputs.extend(_input_hashes(task, inp, mask, lab if aligned else None))
        # truncation: rows longer than max_length, and the target tokens cropping took
        if task.kind == "generation" and ml is not None and aligned:
            _truncation(p, s, chunk, n_sup, ml)
    return s


def _input_hashes(task: Any, inp: torch.Tensor, mask: torch.Tensor | None, lab: torch.Tensor | None) -> list[int]:
    rows = _rows(inp).tolist()
    keep = _rows(mask != 0).tolist() if mask is not None else [[True] * len(r) for r in rows]
    if lab is not None:
        # token j is a target when position j - 1 is supervised (the causal shift)
        tgt = _rows(lab != task.ignore_index).tolist()
        keep = [[k and not (j > 0 and t[j - 1]) for j, k in enumerate(kr)] for kr, t in zip(keep, tgt, strict=True)]
    return [hash(tuple(x for x, k in zip(r, kr, strict=True) if k)) for r, kr in zip(rows, keep, strict=True)]


def _truncation(p: Pilot, s: SplitScan, chunk: list[dict[str, Any]], n_sup: list[int], ml: int) -> None:
    task = p.task
    if task.length is not None:
        lens = [int(user("length", task.length, e)) for e in chunk]
        idx = [i for i, n in enumerate(lens) if n > ml]
    else:
        lens, idx = [], list(range(len(chunk)))
    if not idx:
        return
    longest = max(lens) if lens else 4 * ml
    try:
        full = _collate(p, [chunk[i] for i in idx], {**p.params, "max_length": longest + 2})
    except UserCodeError:  # the collate cannot go past its limit: count the longer examples as losing targets
        full = {}
    lab = full.get(task.label_key)
    if not torch.is_tensor(lab) or lab.shape[0] != len(idx):
        s.lost_known = False
        if lens:
            s.longer.extend(chunk[i]["id"] for i in idx)
            s.lost.extend(chunk[i]["id"] for i in idx)
        return
    unc = _rows(lab != task.ignore_index).sum(1).tolist()
    width = lab.shape[-1]
    if lens and width <= ml:
        # the collate function ignores params["max_length"]: every longer example counts as losing targets
        s.lost_known = False
        s.longer.extend(chunk[i]["id"] for i in idx)
        s.lost.extend(chunk[i]["id"] for i in idx)
        return
    for i, u in zip(idx, unc, strict=True):
        if lens or u > n_sup[i]:
            if lens:
                s.longer.append(chunk[i]["id"])
            if u > n_sup[i]:
                s.lost.append(chunk[i]["id"])


def _batch_checks(p: Pilot, g: Gate, scans: dict[str, SplitScan], ml: int | None) -> None:
    task = p.task

    def merged(key: str) -> list[str]:
        return [f"{n}: {x}" if key in ("ids", "targets", "rows", "mask", "aligned", "loss_mask") else x
                for n, sc in scans.items() for x in sc.problems.get(key, [])]

    scanned = ", ".join(f"{len(s.ids)} {n}" + (f" of {s.total}" if len(s.ids) < s.total else "") for n, s in scans.items())
    fatal = merged("targets") + merged("rows")
    g.check("targets present", not fatal,
            f"batch[{task.label_key!r}] one row per example; scanned {scanned}" if not fatal else _ids(fatal, 3))
    bad = merged("ids")
    g.check("batch carries ids", not bad,
            "collate returns 'ids' in the examples' order" if not bad
            else f"{_ids(bad, 2)}; collate must return 'ids' in the examples' order")
    if fatal:
        return
    if any(s.problems.get("mask") for s in scans.values()):
        g.check("attention mask", False, _ids(merged("mask"), 2) + f"; {task.mask_key} must have the inputs' shape")
    elif task.kind == "generation":
        g.check("attention mask", True, f"{task.mask_key} shaped like {task.input_key}")
    if task.kind == "generation":
        al = merged("aligned")
        g.check("targets aligned with inputs", not al, "labels shaped like the inputs" if not al else _ids(al, 2))
    if ml is not None:
        long = merged("length")
        g.check("lengths within maximum", not long,
                f"every row at most max_length {ml} after collate" if not long
                else f"{len(long)} examples longer than max_length {ml} after collate: {_ids(long)}; crop in collate")
    pad = merged("padding")
    if any(s.masked_rows for s in scans.values()):
        g.check("padding not in the loss", not pad,
                "no padded position (attention mask 0) has a target" if not pad
                else f"{len(pad)} examples have padded positions ({task.mask_key} == 0) whose label is not "
                f"{task.ignore_index}: {_ids(pad)}; set the labels of padding to {task.ignore_index}")
    if task.kind == "generation" and task.instruction_is_input:
        ins = merged("instruction")
        lm = merged("loss_mask")
        allsup = merged("all_supervised")
        if lm:
            g.check("loss mask", False, _ids(lm, 2))
        if ins:
            g.check("instruction not in the loss", False,
                    f"{len(ins)} examples supervise instruction tokens (label != {task.ignore_index} where "
                    f"{task.loss_mask_key} == 0): {_ids(ins)}; the task says the instruction is input only: "
                    f"set its labels to {task.ignore_index}")
        elif allsup:
            g.check("instruction not in the loss", False,
                    f"{len(allsup)} examples have every attended position supervised, so their instruction counts "
                    f"in the loss although the task says it is input only: {_ids(allsup)}; "
                    f"set the instruction's labels to {task.ignore_index}")
        else:
            g.check("instruction not in the loss", True,
                    "instruction positions carry no target" + (f" ({task.loss_mask_key} agrees)" if task.loss_mask_key else ""))
    rng = merged("range")
    if task.kind == "classification" or task.vocab_size is not None:
        what = (f"0..{len(task.label_names) - 1} ({len(task.label_names)} label names)" if task.kind == "classification"
                and task.label_names else "non-negative ids" if task.kind == "classification"
                else f"the vocabulary 0..{int(task.vocab_size(p.params)) - 1}")
        g.check("targets in range", not rng,
                f"every target in {what}" if not rng else f"{len(rng)} examples have targets outside {what}: {_ids(rng)}")
    inr = merged("input_range")
    if inr:
        g.check("inputs in vocabulary", False, f"{len(inr)} examples have input ids outside the vocabulary: {_ids(inr)}")
    fld = merged("field")
    if fld:
        g.check("targets match the examples' labels", False,
                f"{len(fld)} examples whose target differs from their {task.extras.get('label_field', 'label')!r} field: {_ids(fld)}")


def _label_checks(p: Pilot, g: Gate, scans: dict[str, SplitScan]) -> None:
    task = p.task
    names = task.label_names
    field_name = task.extras.get("label_field", "label")
    problems: list[str] = []
    if names:
        seen: dict[str, list[int]] = defaultdict(list)
        for i, n in enumerate(names):
            seen[n].append(i)
        problems += [f"label_names gives {n!r} to ids {', '.join(map(str, ids))}" for n, ids in seen.items() if len(ids) > 1]
    for sname, s in scans.items():
        for name, by_id in s.mapping.items():
            if len(by_id) > 1:
                problems.append(f"{sname}: {name!r} maps to targets " + ", ".join(
                    f"{t} ({_ids(ids, 2)})" for t, ids in sorted(by_id.items())))
        by_target: dict[int, list[str]] = defaultdict(list)
        for name, by_id in s.mapping.items():
            for t in by_id:
                by_target[t].append(name)
        for t, ns in sorted(by_target.items()):
            if len(ns) > 1:
                problems.append(f"{sname}: target {t} stands for " + ", ".join(
                    f"{n!r} ({_ids(s.mapping[n][t], 2)})" for n in sorted(ns)))
    g.check("label mapping one-to-one", not problems,
            (f"{len(names)} names, one id each" if names else "no label_names") if not problems
            else "; ".join(problems[:4]) + ("; …" if len(problems) > 4 else ""))

    # the mapping each split reveals, and per-split label lists, must agree
    differ: list[str] = []
    per_split = task.extras.get("label_names_by_split")
    if callable(per_split):
        per_split = user("label_names_by_split", per_split, p.params)
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
                    differ.append(f"{sname} maps {name!r} to {t} ({_ids(by_id[t], 2)}) but train maps it to "
                                  f"{ref_map[name]} ({_ids(ref.mapping[name][ref_map[name]], 2)})")
    g.check("label mapping same in every split", not differ,
            "train, val and test map each label name to the same id" if not differ
            else "; ".join(differ[:4]) + ("; …" if len(differ) > 4 else ""))

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
            g.check("targets match label names", not wrong,
                    f"every example's {field_name!r} equals label_names[target]" if not wrong
                    else f"{len(wrong)} examples whose {field_name!r} is not label_names[target]: "
                    + _ids([f"{i} is {n!r} but target {t} is {names[t]!r}" for n, t, i in wrong], 3)
                    + f"; the collate maps {mapping}: fix the label -> id mapping or label_names")
        counts = Counter(t for t in scans["train"].targets if t is not None) if "train" in scans else Counter()
        absent = [n for i, n in enumerate(names) if counts.get(i, 0) == 0]
        g.check("every class in train", not absent,
                f"{len(names)} classes, the rarest has {min(counts.values()) if counts else 0} train examples" if not absent
                else f"no training example of {', '.join(map(repr, absent))}", warn=True)


def _truncation_checks(p: Pilot, g: Gate, s: SplitScan, ml: int | None) -> None:
    n = len(s.ids)
    none_left = [i for i, k in zip(s.ids, s.supervised, strict=True) if k == 0]
    allowed = float(p.task.extras.get("max_no_target_share", 0.0))
    share = len(none_left) / max(n, 1)
    g.extra["truncation"] = {"examples": n, "lose_target_tokens": len(s.lost), "no_target_left": len(none_left),
                             "longer_than_max": len(s.longer), "max_length": ml}
    g.check("supervised tokens left", share <= allowed,
            f"every train example keeps a supervised token (max_length {ml})" if not none_left
            else f"{_share(len(none_left), n)} train examples have no supervised token left"
            + (f" after cropping to max_length {ml}" if ml else "") + f": {_ids(none_left)}; "
            "they cost compute and teach nothing: raise max_length, crop the instruction instead of the answer, or drop them")
    if ml is None:
        return
    how = "" if s.lost_known else " (assumed: the collate function ignores params['max_length'])"
    g.check("targets not truncated", not s.lost,
            f"no target token cropped by max_length {ml}" if not s.lost
            else f"{_share(len(s.lost), n)} train examples lose target tokens to max_length {ml}{how}: {_ids(s.lost)}",
            warn=True)


def _ignored_batches(p: Pilot, g: Gate, s: SplitScan) -> None:
    """Microbatches of the first epoch's order (as training draws them) whose every position is ignored."""
    if not s.ids or len(s.ids) < s.total:
        return
    tr = p.trainer
    order = tr.order._perm(0) if getattr(tr, "order", None) is not None else list(range(s.total))
    mb = max(int(tr.microbatch), 1)
    batches = [order[i : i + mb] for i in range(0, len(order) - (len(order) % mb if tr.order.drop_last else 0), mb)]
    empty = [(b, idx) for b, idx in enumerate(batches) if idx and all(s.supervised[i] == 0 for i in idx)]
    g.check("no batch entirely ignored", not empty,
            f"each of the {len(batches)} microbatches of the first epoch has a supervised position" if not empty
            else f"{_share(len(empty), len(batches))} microbatches of the first epoch have every position ignored "
            f"(their loss is 0/0): " + _ids([f"batch {b} ({', '.join(str(s.ids[i]) for i in idx[:3])})" for b, idx in empty], 3))


# --------------------------------------------------------------------------- inspection


def _jsonable(v: Any) -> Any:
    if torch.is_tensor(v):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def inspect_rows(p: Pilot, examples: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """The examples exactly as the loss receives them (collated together, as one microbatch)."""
    task = p.task
    if not examples:
        return []
    batch = _collate(p, examples)
    out = []
    n = len(examples)
    for r, ex in enumerate(examples):
        row = {k: _jsonable(v[r]) for k, v in batch.items() if torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == n}
        text: Any = None
        if task.decode is not None:
            try:
                dec = task.decode(batch, r)
                text = [[str(t), bool(sup)] for t, sup in dec] if isinstance(dec, (list, tuple)) else str(dec)
            except Exception as exc:  # noqa: BLE001 - a broken decoder is reported, not fatal
                print(f"--- exception in the task's decode() while inspecting ---\n{traceback.format_exc()}", file=sys.stderr)
                text = f"(decode raised {type(exc).__name__}: {exc})"
        lab = batch.get(task.label_key)
        target: Any = None
        label_name = None
        if task.kind == "classification" and torch.is_tensor(lab):
            target = int(_rows(lab)[r, 0])
            if task.label_names and 0 <= target < len(task.label_names):
                label_name = task.label_names[target]
        elif isinstance(text, list):
            target = "".join(t for t, sup in text if sup)
        elif torch.is_tensor(lab):
            target = [x for x in _rows(lab)[r].tolist() if x != task.ignore_index]
        out.append({"split": split, "id": ex.get("id"), "row": row, "text": text, "target": target, "label_name": label_name})
    return out


def _write_inspect(p: Pilot, g: Gate, scans: dict[str, SplitScan]) -> None:
    task = p.task
    n_train, n_val = task.extras.get("inspect_examples", (4, 2))
    examples: list[dict[str, Any]] = []
    for split, n, size in (("train", n_train, p.trainer.microbatch), ("val", n_val, p.trainer.eval_microbatch)):
        chosen = list(p.splits.get(split, [])[: int(n)])
        for i in range(0, len(chosen), max(int(size), 1)):  # padded together as one microbatch of training would be
            examples += inspect_rows(p, chosen[i : i + max(int(size), 1)], split)
    doc: dict[str, Any] = {"examples": examples}
    if task.kind == "classification":
        names = task.label_names
        doc["class_counts"] = {
            n: {(names[t] if names and 0 <= t < len(names) else str(t)): c
                for t, c in sorted(Counter(x for x in s.targets if x is not None).items())}
            for n, s in scans.items()
        }
        doc["label_names"] = list(names) if names else None
    path = Path(p.rdir) / INSPECT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)
    g.extra["inspect"] = {"file": INSPECT_FILE, "examples": len(examples)}
    if doc.get("class_counts"):
        g.extra["class_counts"] = doc["class_counts"]


# --------------------------------------------------------------------------- leakage


def leakage_gate(p: Pilot, g: Gate) -> None:
    task, splits = p.task, p.splits
    unit = task.group_unit
    members: dict[str, dict[Any, list[Any]]] = {}
    for name, data in splits.items():
        m: dict[Any, list[Any]] = defaultdict(list)
        for ex in data:
            if isinstance(ex, dict):
                m[_hashable(ex.get("group"))].append(ex.get("id"))
        members[name] = m
    names = list(members)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            both = sorted(set(members[a]) & set(members[b]), key=str)
            if not both:
                g.check(f"{a}/{b} disjoint", True, f"no {unit} in both ({len(members[a])} and {len(members[b])} {unit}s)")
                continue
            na = sum(len(members[a][x]) for x in both)
            nb = sum(len(members[b][x]) for x in both)
            shown = _ids([f"{x!s} ({a} {_ids(members[a][x], 2)}; {b} {_ids(members[b][x], 2)})" for x in both], 3)
            g.check(f"{a}/{b} disjoint", False,
                    f"{len(both)} {unit}s in both {a} and {b} ({na} {a} examples, {nb} {b} examples): {shown}; "
                    f"split by {unit} so each one lands in a single split")
    if task.extras.get("ordered_groups") or unit.lower() in PERIOD_UNITS:
        _period_order(g, members, unit)
    _identical_inputs(p, g)


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
        g.check(f"{unit}s sortable", False, f"the {unit} values cannot be compared ({_ids(sorted(map(str, train)), 3)}): "
                "use ISO dates or numbers")
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
        g.check(f"{name} after train", not early,
                f"every {name} {unit} after the last train {unit} {last}" if not early
                else f"{len(early)} {name} {unit}s ({n_ex} examples) are not after the last train {unit} {last}: "
                + _ids([f"{x} ({_ids(members[name][x], 2)})" for x in early], 3)
                + f"; validate and test on {unit}s after training's, as the model will be used")


def _identical_inputs(p: Pilot, g: Gate) -> None:
    scans: dict[str, SplitScan] = getattr(p, "data_scans", None) or {}
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
    g.check("no identical inputs across splits", not count,
            "no input appears in two splits" if not count
            else f"{count} examples repeat an input of another split: {_ids(found, 4)}; "
            "remove the duplicates or keep them in one split", warn=True)


# --------------------------------------------------------------------------- forward: the initial loss


def initial_loss(p: Pilot, g: Gate, loss: float) -> None:
    task, params = p.task, p.params
    classes, what = None, ""
    if task.kind == "classification" and task.label_names:
        classes, what = len(task.label_names), "classes"
    elif task.kind == "generation" and task.vocab_size:
        classes, what = int(user("vocab_size", task.vocab_size, params)), "vocabulary"
    if not classes or classes < 2:
        return
    uniform = math.log(classes)
    ratio = loss / uniform
    ok = 0.5 <= ratio <= 2.0
    g.extra["initial_loss"] = {"loss": loss, "uniform": uniform, "classes": classes, "ratio": ratio}
    g.check("initial loss near uniform", ok,
            f"{loss:.3f} vs ln {classes} = {uniform:.3f} for uniform predictions over the {what} ({ratio:.2f}x)"
            + ("" if ok else ": far from uniform; check the output layer's size and initialisation (logits too large), "
               "the loss's reduction and what it is averaged over"),
            warn=True)


# --------------------------------------------------------------------------- overfit a tiny subset


def overfit_gate(p: Pilot, g: Gate) -> None:
    """Train a fresh copy on N fixed examples: the loss must collapse and the targets come back.

    This proves the mechanics (the model can fit what it is shown: labels,
    loss, optimizer and trainable parameters are wired up), not generalisation.
    N is the campaign's ``overfit_examples`` clamped to 8..32; the steps are
    ``overfit_steps`` (at most 2000), stopping early once the loss is below
    ``overfit_loss_ratio`` x its start and every target is predicted. The
    learning rate is the campaign's, raised to at least 3e-3 so a tiny subset is
    fitted in few steps (``Task.extras["overfit_lr"]`` sets it); when that raised
    rate diverges, one more attempt runs at a tenth of it.
    """
    cfg = p.pilot_cfg
    base = p.trainer
    task = base.task
    n_want = min(max(int(cfg.get("overfit_examples", 16)), 8), 32)
    steps = min(max(int(cfg.get("overfit_steps", 60)), 1), 2000)
    ratio = float(cfg.get("overfit_loss_ratio", 0.1))
    train = list(base.splits["train"])
    scans = getattr(p, "data_scans", None) or {}
    empty = set()
    if "train" in scans:
        empty = {i for i, k in zip(scans["train"].ids, scans["train"].supervised, strict=True) if k == 0}
    examples = [e for e in train if e.get("id") not in empty][:n_want]
    if len(examples) < min(n_want, 8):
        examples = train[:n_want]
    n = len(examples)
    campaign_lr = float(base.params["lr"])
    lr = float(task.extras.get("overfit_lr") or cfg.get("overfit_lr") or max(campaign_lr, 3e-3))
    chunk = base.microbatch if base.device.type == "cuda" else n  # on a GPU, batches no larger than the proven microbatch
    mbs = [examples[i : i + chunk] for i in range(0, n, chunk)]
    g.inputs.update({"examples": n, "steps": steps, "lr": lr, "microbatches": len(mbs),
                     "ids": [e.get("id") for e in examples][:8]})
    saved_rng = rng_state()
    try:
        run = _overfit_attempt(p, examples, mbs, lr, steps, ratio)
        diverged = run["bad_step"] is not None or run["losses"][-1] > run["losses"][0]
        if diverged and lr > campaign_lr and not task.extras.get("overfit_lr"):
            g.extra["overfit_retry"] = {"lr": lr, "steps": len(run["losses"]), "last": _round(run["losses"][-1])}
            lr = lr / 10
            g.inputs["lr"] = lr
            run = _overfit_attempt(p, examples, mbs, lr, steps, ratio)
    finally:
        set_rng_state(saved_rng)  # the piloted run's random stream is left as it was
    losses, bad_step, recovered = run["losses"], run["bad_step"], run["recovered"]
    finite = bad_step is None
    every = max(1, len(losses) // 20)
    g.extra["overfit"] = {"losses": [_round(x) for x in losses[::every]] + ([_round(losses[-1])] if (len(losses) - 1) % every else []),
                          "steps": len(losses), "examples": n, "lr": lr}
    g.check("finite throughout", finite,
            f"{len(losses)} steps, every loss and gradient finite" if finite
            else f"non-finite {'loss' if not math.isfinite(losses[-1]) else 'gradient'} at overfit step {bad_step} "
            f"(loss {losses[-1]:.4g}, lr {lr:g}); lower the learning rate or look for a division by zero")
    first, last = losses[0], losses[-1]
    threshold = ratio * first
    fell = finite and last <= threshold
    g.check("loss falls below threshold", fell,
            f"{first:.3f} -> {last:.3f} in {len(losses)} steps on {n} fixed examples (threshold {threshold:.3f} = "
            f"{ratio:g}x the start, lr {lr:g})" + ("; this proves the mechanics, not generalisation" if fell else
                                                  f"; the model cannot fit {n} examples it sees at every step"))
    if task.predict is None:
        g.check("targets recovered", False, "the task has no predict(): predictions were not compared with the targets", warn=True)
    elif recovered is not None:
        share, wrong = recovered
        g.check("targets recovered", share >= 1.0,
                f"predictions match every target of the {n} examples" if share >= 1.0
                else f"{share:.0%} of the {n} examples predicted exactly; wrong: {_ids(wrong)}")
    failed = [c for c in g.checks if not c["ok"] and not c.get("warn")]
    if failed:
        g.message = (f"overfit failed: {'; '.join(c['name'] + ': ' + c['detail'] for c in failed)}. "
                     f"A model that cannot memorise {n} fixed examples will not learn the full data set: check that "
                     "its output depends on its input (pooling, masking), the labels, the loss, the learning rate "
                     "and frozen parameters before paying for a long run. (Passing proves the mechanics, not generalisation.)")


def _overfit_attempt(p: Pilot, examples: list[dict[str, Any]], mbs: list[list[dict[str, Any]]], lr: float,
                     steps: int, ratio: float) -> dict[str, Any]:
    base = p.trainer
    params = dict(base.params)
    params.update(lr=lr, schedule="constant", warmup_updates=0, weight_decay=0.0, dropout=0.0)
    tr = Trainer(base.task, params, base.seed, base.device, splits={"train": examples, "val": examples})
    tr.microbatch, tr.accumulation = len(mbs[0]), len(mbs)
    tr.load_data()
    tr.build()  # a fresh model from the task, never a copy of the one being piloted
    for m in tr.model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    losses: list[float] = []
    bad_step = None
    recovered: tuple[float, list[Any]] | None = None
    at = 0
    for step in range(1, steps + 1):
        loss = float(tr.accumulate(mbs, check_finite=False)["loss"])
        losses.append(loss)
        if not math.isfinite(loss):
            bad_step = step
            break
        norm = tr.apply(check_finite=False).get("grad_norm")
        if norm is None and tr.scaler is None:  # with fp16 the scaler skips such a step by design
            bad_step = step
            break
        if loss <= ratio * losses[0] and (step % 5 == 0 or step == steps):
            recovered, at = _recovered(tr, examples), step
            if recovered[0] >= 1.0:
                break
    if bad_step is None and base.task.predict is not None and at != len(losses):
        recovered = _recovered(tr, examples)  # after the last update
    return {"losses": losses, "bad_step": bad_step, "recovered": recovered}


def _round(x: float) -> float | None:
    return round(x, 5) if math.isfinite(x) else None


@torch.no_grad()
def _recovered(tr: Trainer, examples: list[dict[str, Any]]) -> tuple[float, list[Any]]:
    """Share of examples whose every supervised target the model predicts, and the ids it gets wrong."""
    task = tr.task
    was = tr.model.training
    tr.model.eval()
    wrong: list[Any] = []
    try:
        for i in range(0, len(examples), tr.microbatch):
            part = examples[i : i + tr.microbatch]
            batch = tr.collate(part)
            pred = user("predict", task.predict, tr.model, batch)
            lab = batch[task.label_key]
            if not torch.is_tensor(pred) or pred.shape[0] != lab.shape[0] or pred.numel() != lab.numel():
                raise UserCodeError("predict", ValueError(
                    f"returned {tuple(pred.shape) if torch.is_tensor(pred) else type(pred).__name__}, targets are {tuple(lab.shape)}"))
            pred = pred.reshape(lab.shape)
            keep = lab != task.ignore_index
            ok = _rows((pred == lab) | ~keep).all(1).tolist()
            wrong += [e.get("id") for e, o in zip(part, ok, strict=False) if not o]
    finally:
        tr.model.train(was)
    return 1.0 - len(wrong) / max(len(examples), 1), wrong
