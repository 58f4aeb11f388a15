"""Data: what reaches the loss: identifiers, targets, lengths, masks, truncation, label mappings.

Each function fills the phase's :class:`~cockpit.pilot.gate.Gate` with checks whose
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
``measure_targets``       False to skip the probe (default True): the data gate builds the model once more
                          (under a kept random state, freed before the forward phase) to measure which output
                          each target is scored against (``alignment.py``); without it the label convention
                          is taken as declared
``ordered_groups``        (read by the leakage phase) True when the group is a period:
                          validation and test groups must come after every training group
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import torch

from ... import events as ev
from .. import inspection
from ..context import Context
from ..datascan import SCAN_SECONDS, SplitScan, collate, ids_text, scan, share_text
from ..gate import Gate, Phase
from ..splits import data_revision
from ..trainer import Trainer
from ..usercode import user_int
from . import alignment, declared, dependence, ending, labelmap, ranges, semantics


def run(ctx: Context, g: Gate) -> None:
    ctx.trainer_ = Trainer(ctx.the_task, ctx.params, ctx.seed, ctx.device, rank=ctx.rank, world=ctx.world)
    ctx.trainer.load_data()
    data_gate(ctx, g)


def data_gate(ctx: Context, g: Gate) -> None:
    task, splits = ctx.the_task, ctx.trainer.splits
    for name in ("train", "val"):
        g.check(f"{name} split", name in splits and len(splits[name]) > 0, f"{len(splits.get(name, []))} examples")
    if not splits.get("train"):
        return
    _identifier_checks(ctx, g)
    ml = ctx.max_length()
    first = [splits["train"][i] for i in range(min(len(splits["train"]), max(ctx.trainer.microbatch, 2)))]
    batch = collate(task, ctx.params, first)
    if "ids" not in batch:
        batch["ids"] = [e.get("id", f"train[{i}]") if isinstance(e, dict) else i for i, e in enumerate(first)]
    declared.keys(g, task, batch)
    declared.controls(ctx, g)
    labelled = torch.is_tensor(batch.get(task.label_key))
    # the model, built apart, tells an encoder-decoder and where the loss scores each target (alignment.py), and
    # what each output depends on (dependence.py)
    probe = alignment.build_probe(ctx) if task.extras.get("measure_targets", True) else None
    encdec = semantics.encoder_decoder(
        probe.model if probe and labelled else None, batch, task.input_key, task.label_key
    )
    budget = time.monotonic() + float(task.extras.get("scan_seconds", SCAN_SECONDS))
    order = ["train", *(n for n in splits if n != "train")]  # the training split first: it matters most
    scans = {
        name: scan(task, ctx.params, name, list(splits[name]), ml, budget, encdec=encdec)
        for name in order
        if len(splits.get(name, []))
    }
    ctx.scans = scans  # the leakage and overfit gates reuse what was learned here
    targets = labelmap.layout(task, batch.get(task.label_key)) if task.kind == "classification" else "example"
    dense = None
    if targets != "example" and all(s.labelled for s in scans.values()):  # a class per position, or multi-hot
        again = time.monotonic() + float(task.extras.get("scan_seconds", SCAN_SECONDS))  # a budget of its own
        dense = labelmap.dense_targets(ctx, scans, splits, targets, again)
    _batch_checks(ctx, g, scans, ml, encdec)
    hints = ranges.declared(task, probe.model if probe else None)
    ranges.judge(g, {n: s.floats for n, s in scans.items()}, hints)
    semantics.collate_deterministic(ctx, g, first)
    semantics.rows_distinct(g, first, batch)
    if probe is not None:
        if labelled:
            scored = alignment.measure(ctx, probe, batch)
            alignment.own_example(g, batch, scored)
            if task.kind == "generation":
                alignment.targets_aligned(ctx, g, batch, scored, encdec)
        dependence.measure(ctx, g, batch, probe.model, probe.error)
        alignment.release(probe)
    if not all(s.labelled for s in scans.values()):
        _unlabelled(ctx, g)
        return _finish(ctx, g, scans)
    if task.kind == "classification":
        labelmap.label_checks(ctx, g, scans, dense)
    if task.kind == "generation":
        ending.check(ctx, g, encdec)
        _truncation_checks(ctx, g, scans["train"], ml)
    _ignored_batches(ctx, g, scans["train"])
    _finish(ctx, g, scans)


def _finish(ctx: Context, g: Gate, scans: dict[str, SplitScan]) -> None:
    g.inputs["scanned"] = ", ".join(
        f"{len(s.ids)}/{s.total} {n}" if len(s.ids) < s.total else f"{s.total} {n}" for n, s in scans.items()
    )
    inspection.write(ctx, g, scans)
    ctx.data_revision = data_revision(ctx.trainer.splits)  # the examples as the task produced them, hashed
    g.extra["data_revision"] = ctx.data_revision


LABEL_CHECKS = ("targets in range", "padding not in the loss", "no batch entirely ignored")


def _unlabelled(ctx: Context, g: Gate) -> None:
    """A batch without targets: the label checks measured nothing, and say why."""
    task = ctx.the_task
    why = (
        f"the batch has no {task.label_key!r}: the {task.kind!r} task's loss makes its own targets (a diffusion "
        "model's noise, a contrastive loss's in-batch pairing, a preference loss's chosen and rejected answers), "
        "so no target can be checked"
    )
    for name in LABEL_CHECKS:
        g.not_applicable(name, why)


def _identifier_checks(ctx: Context, g: Gate) -> None:
    task = ctx.the_task
    missing: list[str] = []
    where: dict[Any, list[str]] = defaultdict(list)
    no_group: list[Any] = []
    grouped = 0
    positional = [n for n, d in ctx.trainer.splits.items() if getattr(d, "named_by_position", False)]
    for split, data in ctx.trainer.splits.items():
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
            else:
                grouped += 1
    dup = [(k, v) for k, v in where.items() if len(v) > 1]
    named = (
        f"; {', '.join(positional)} examples have no 'id' field and are named by split and position (train[17])"
        if positional
        else ""
    )
    g.check(
        "identifiers present",
        not missing,
        f"every example of {len(where)} has an id{named}"
        if not missing
        else f"{len(missing)} examples without an id: {ids_text(missing)}; give every example a unique 'id' "
        "(or none at all: examples are then named by position)",
    )
    g.check(
        "identifiers unique",
        not dup,
        f"{len(where)} unique ids across splits"
        if not dup
        else f"{len(dup)} ids used more than once: "
        + ids_text([f"{k!r} at {' and '.join(v[:3])}" for k, v in dup], 4)
        + "; ids must be unique across train, val and test",
    )
    if not grouped:  # no example names a group: each is its own, and leakage is judged on identical inputs
        g.check(
            "leakage group present",
            True,
            f"no example has a 'group' field: each example is its own "
            f"{task.group_unit}, and the leakage gate compares inputs across splits",
        )
        return
    g.check(
        "leakage group present",
        not no_group,
        f"every example names its {task.group_unit}"
        if not no_group
        else f"{len(no_group)} of {len(where)} examples have no 'group' ({task.group_unit}) while the others have "
        f"one: {ids_text(no_group)}",
    )


def _batch_checks(ctx: Context, g: Gate, scans: dict[str, SplitScan], ml: int | None, encdec: bool) -> None:
    task = ctx.the_task

    def merged(key: str) -> list[str]:
        return [
            f"{n}: {x}" if key in ("ids", "targets", "rows", "mask", "aligned", "loss_mask") else x
            for n, sc in scans.items()
            for x in sc.problems.get(key, [])
        ]

    scanned = ", ".join(
        f"{len(s.ids)} {n}" + (f" of {s.total}" if len(s.ids) < s.total else "") for n, s in scans.items()
    )
    fatal = merged("targets") + merged("rows")
    if not all(s.labelled for s in scans.values()):
        g.not_applicable(
            "targets present",
            f"batch[{task.label_key!r}] is absent and the task's kind is {task.kind!r}: an objective that makes its "
            f"own targets (self-supervised, contrastive, preference) needs none, a classification would; scanned "
            f"{scanned}",
        )
    else:
        g.check(
            "targets present",
            not fatal,
            f"batch[{task.label_key!r}] one row per example; scanned {scanned}" if not fatal else ids_text(fatal, 3),
        )
    bad = merged("ids")
    by_cockpit = any(sc.ids_from_cockpit for sc in scans.values())
    g.check(
        "batch carries ids",
        not bad,
        (
            "the collate returns no 'ids': Cockpit attaches the ids of the examples it collates"
            if by_cockpit
            else "collate returns 'ids' in the examples' order"
        )
        if not bad
        else f"{ids_text(bad, 2)}; collate must return 'ids' in the examples' order (or none at all)",
    )
    if fatal:
        return
    if any(s.problems.get("mask") for s in scans.values()):
        g.check(
            "attention mask",
            False,
            ids_text(merged("mask"), 2) + f"; {task.mask_key} must have the shape of {task.input_key} (or of its "
            "batch and time axes, for frames of features): a mask of another length masks the wrong positions",
        )
    elif task.kind == "generation":
        g.check("attention mask", True, f"{task.mask_key} shaped like {task.input_key}")
    if task.kind == "generation" and encdec:
        g.not_applicable(
            "targets aligned with inputs",
            f"an encoder-decoder: the labels are the decoder's targets, {task.input_key} the encoder's input",
        )
    elif task.kind == "generation":
        al = merged("aligned")
        g.check("targets aligned with inputs", not al, "labels shaped like the inputs" if not al else ids_text(al, 2))
    if ml is not None:
        long = merged("length")
        g.check(
            "lengths within maximum",
            not long,
            f"every row at most max_length {ml} after collate"
            if not long
            else f"{len(long)} examples longer than max_length {ml} after collate: {ids_text(long)}; crop in collate",
        )
    pad = merged("padding")
    if any(s.masked_rows for s in scans.values()) and not merged("label_padding"):
        g.check(
            "padding not in the loss",
            not pad,
            "no padded position (attention mask 0) has a target"
            if not pad
            else f"{len(pad)} examples have padded positions ({task.mask_key} == 0) whose label is not "
            f"{task.ignore_index}: {ids_text(pad)}; set the labels of padding to {task.ignore_index}",
        )
    lpad = merged("label_padding")
    if lpad:
        value = next(sc.label_pad_value for sc in scans.values() if sc.label_pad_value is not None)
        g.check(
            "padding not in the loss",
            False,
            f"{len(lpad)} examples have their {task.label_key!r} padded with token {value}, not the ignore index "
            f"{task.ignore_index} (positions padded: {ids_text(lpad, 3)}): every padded position is a target, so "
            f"the model learns to emit padding. Pad the targets with {task.ignore_index} (what transformers' "
            "seq2seq and CTC collators do)",
        )
    if task.kind == "generation" and task.instruction_is_input:
        ins = merged("instruction")
        lm = merged("loss_mask")
        allsup = merged("all_supervised")
        if lm:
            g.check("loss mask", False, ids_text(lm, 2))
        if ins:
            g.check(
                "instruction not in the loss",
                False,
                f"{len(ins)} examples supervise instruction tokens (label != {task.ignore_index} where "
                f"{task.loss_mask_key} == 0): {ids_text(ins)}; the task says the instruction is input only: "
                f"set its labels to {task.ignore_index}",
            )
        elif allsup:
            g.check(
                "instruction not in the loss",
                False,
                f"{len(allsup)} examples have every attended position supervised, so their instruction counts "
                f"in the loss although the task says it is input only: {ids_text(allsup)}; "
                f"set the instruction's labels to {task.ignore_index}",
            )
        else:
            g.check(
                "instruction not in the loss",
                True,
                "instruction positions carry no target"
                + (f" ({task.loss_mask_key} agrees)" if task.loss_mask_key else ""),
            )
    rng = merged("range")
    vocab_size = task.vocab_size
    if all(s.labelled for s in scans.values()) and (task.kind == "classification" or vocab_size is not None):
        what = (
            f"0..{len(task.label_names) - 1} ({len(task.label_names)} label names)"
            if task.kind == "classification" and task.label_names
            else "non-negative ids"
            if task.kind == "classification"
            else f"the vocabulary 0..{user_int('vocab_size', vocab_size, ctx.params) - 1}"
            if vocab_size is not None
            else "the vocabulary"
        )
        values = sorted(set(merged("range_values")))
        # a class per position, all outside values one constant (255 around a segmentation mask's objects): most
        # likely an ignore value the loss has (SegFormer's semantic_loss_ignore_index) and the Task does not declare
        undeclared = bool(rng) and len(values) == 1
        g.check(
            "targets in range",
            not rng,
            f"every target in {what}"
            if not rng
            else f"{len(rng)} examples have targets outside {what}: {ids_text(rng)}"
            + (
                f"; every one is {values[0]}: if the loss ignores {values[0]} (an ignore index of its own), declare "
                f"Task.ignore_index = {values[0]} so the data checks skip it; if it does not, it is a label outside "
                "the classes"
                if undeclared
                else ""
            ),
            warn=undeclared,
        )
    inr = merged("input_range")
    if inr:
        g.check(
            "inputs in vocabulary", False, f"{len(inr)} examples have input ids outside the vocabulary: {ids_text(inr)}"
        )
    fld = merged("field")
    if fld:
        g.check(
            "targets match the examples' labels",
            False,
            f"{len(fld)} examples whose target differs from their {task.extras.get('label_field', 'label')!r} field: {ids_text(fld)}",
        )


def _truncation_checks(ctx: Context, g: Gate, s: SplitScan, ml: int | None) -> None:
    n = len(s.ids)
    none_left = [i for i, k in zip(s.ids, s.supervised, strict=True) if k == 0]
    allowed = float(ctx.the_task.extras.get("max_no_target_share", 0.0))
    share = len(none_left) / max(n, 1)
    g.extra["truncation"] = {
        "examples": n,
        "lose_target_tokens": len(s.lost),
        "no_target_left": len(none_left),
        "longer_than_max": len(s.longer),
        "max_length": ml,
    }
    g.check(
        "supervised tokens left",
        share <= allowed,
        f"every train example keeps a supervised token (max_length {ml})"
        if not none_left
        else f"{share_text(len(none_left), n)} train examples have no supervised token left"
        + (f" after cropping to max_length {ml}" if ml else "")
        + f": {ids_text(none_left)}; "
        "they cost compute and teach nothing: raise max_length, crop the instruction instead of the answer, or drop them",
    )
    if ml is None:
        return
    how = "" if s.lost_known else " (assumed: the collate function ignores params['max_length'])"
    g.check(
        "targets not truncated",
        not s.lost,
        f"no target token cropped by max_length {ml}"
        if not s.lost
        else f"{share_text(len(s.lost), n)} train examples lose target tokens to max_length {ml}{how}: {ids_text(s.lost)}",
        warn=True,
    )


def _ignored_batches(ctx: Context, g: Gate, s: SplitScan) -> None:
    """Microbatches of the first epoch's order (as training draws them) whose every position is ignored."""
    if not s.ids or len(s.ids) < s.total:
        return
    tr = ctx.trainer
    order = tr.order.perm(0)
    mb = max(int(tr.microbatch), 1)
    used = len(order) - (len(order) % tr.order.per_update if tr.order.drop_last else 0)  # whole updates only
    batches = [order[i : i + mb] for i in range(0, used, mb)]
    empty = [(b, idx) for b, idx in enumerate(batches) if idx and all(s.supervised[i] == 0 for i in idx)]
    g.check(
        "no batch entirely ignored",
        not empty,
        f"each of the {len(batches)} microbatches of the first epoch has a supervised position"
        if not empty
        else f"{share_text(len(empty), len(batches))} microbatches of the first epoch have every position ignored "
        f"(their loss is 0/0): "
        + ids_text([f"batch {b} ({', '.join(str(s.ids[i]) for i in idx[:3])})" for b, idx in empty], 3),
    )


def inputs(ctx: Context) -> dict[str, ev.JSON]:
    return {"microbatch": ctx.settings.microbatch, "max_length": ctx.max_length()}


PHASE = Phase(
    "data",
    run,
    remedy="fix the dataset or the collate function (ids, targets, lengths, masks) before any training",
    checks=(
        "train split",
        "val split",
        "identifiers present",
        "identifiers unique",
        "leakage group present",
        "targets present",
        "batch carries ids",
        "attention mask",
        "targets aligned with inputs",
        "targets aligned as declared",
        "targets scored against their own example",
        "rows differ where examples differ",
        ranges.NAME,
        "every input field read",
        "examples independent",
        "targets hidden from the model",
        "lengths within maximum",
        "padding not in the loss",
        "instruction not in the loss",
        "targets in range",
        "label mapping one-to-one",
        "label mapping same in every split",
        "targets match label names",
        "every class in train",
        "supervised tokens left",
        "targets not truncated",
        "no batch entirely ignored",
    ),
    independent=True,
    inputs=inputs,
    doc="identifiers, targets, lengths, masks; inspected examples",
)
