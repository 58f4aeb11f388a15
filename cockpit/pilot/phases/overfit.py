"""Overfit: a fresh copy of the user's model learns a tiny fixed subset (the mechanics work, not generalisation).

N examples (the campaign's ``overfit_examples`` clamped to 8..32, those with a
supervised target first) are trained on at every step with the user's own
model, loss and optimizer (a constant learning rate, raised to at least 3e-3 so
a tiny subset is fitted in few steps; ``[pilot] overfit_lr`` sets it; when that
raised rate diverges, one more attempt runs at a tenth of it). The verdict
rests on two figures, both with thresholds in ``[pilot]``:

- the loss must fall to ``overfit_loss_ratio`` x its start (default 0.1);
- the share of supervised targets predicted right (token accuracy for a
  language model, example accuracy for a classifier) must reach
  ``overfit_accuracy`` (default 0.9): a character-level model can never
  predict the first position of a window, so exact match of whole examples
  would be a false alarm.

Predictions come from the task's ``predict`` or, without one, from the argmax
of the model's logits, aligned by the task's label convention; with neither
(no logits to read) the verdict is on the loss alone, and says so.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ..context import Context
from ..datascan import ids_text, rows
from ..gate import Gate, Phase
from ..rng import rng_state, set_rng_state
from ..trainer import Trainer


def run(ctx: Context, g: Gate) -> None:
    cfg = ctx.pilot_cfg
    base = ctx.trainer
    task = base.task
    n_want = min(max(int(cfg.get("overfit_examples", 16)), 8), 32)
    steps = min(max(int(cfg.get("overfit_steps", 60)), 1), 2000)
    ratio = float(cfg.get("overfit_loss_ratio", 0.1))
    need = float(cfg.get("overfit_accuracy", 0.9))
    train = base.splits["train"]
    scans = ctx.scans
    empty: set[Any] = set()
    if "train" in scans:
        empty = {i for i, k in zip(scans["train"].ids, scans["train"].supervised, strict=True) if k == 0}
    pool = [train[i] for i in range(min(len(train), 4 * n_want + len(empty)))]
    examples = [e for e in pool if e.get("id") not in empty][:n_want]
    if len(examples) < min(n_want, 8):
        examples = pool[:n_want]
    n = len(examples)
    campaign_lr = float(base.params["lr"])
    lr = float(task.extras.get("overfit_lr") or cfg.get("overfit_lr") or max(campaign_lr, 3e-3))
    chunk = (
        base.microbatch if base.device.type == "cuda" else n
    )  # on a GPU, batches no larger than the proven microbatch
    mbs = [examples[i : i + chunk] for i in range(0, n, chunk)]
    g.inputs.update(
        {"examples": n, "steps": steps, "lr": lr, "microbatches": len(mbs), "ids": [e.get("id") for e in examples][:8]}
    )
    saved_rng = rng_state()
    try:
        attempt = _attempt(ctx, examples, mbs, lr, steps, ratio, need)
        diverged = attempt["bad_step"] is not None or attempt["losses"][-1] > attempt["losses"][0]
        if diverged and lr > campaign_lr and not task.extras.get("overfit_lr") and not cfg.get("overfit_lr"):
            g.extra["overfit_retry"] = {
                "lr": lr,
                "steps": len(attempt["losses"]),
                "last": _round(attempt["losses"][-1]),
            }
            lr = lr / 10
            g.inputs["lr"] = lr
            attempt = _attempt(ctx, examples, mbs, lr, steps, ratio, need)
    finally:
        set_rng_state(saved_rng)  # the piloted run's random stream is left as it was
    _verdict(g, attempt, n, lr, ratio, need)


def _verdict(g: Gate, attempt: dict[str, Any], n: int, lr: float, ratio: float, need: float) -> None:
    losses, bad_step, acc = attempt["losses"], attempt["bad_step"], attempt["accuracy"]
    finite = bad_step is None
    every = max(1, len(losses) // 20)
    g.extra["overfit"] = {
        "losses": [_round(x) for x in losses[::every]] + ([_round(losses[-1])] if (len(losses) - 1) % every else []),
        "steps": len(losses),
        "examples": n,
        "lr": lr,
        "accuracy": None if acc is None else round(acc[0], 4),
        "targets": None if acc is None else acc[1],
    }
    g.check(
        "finite throughout",
        finite,
        f"{len(losses)} steps, every loss and gradient finite"
        if finite
        else f"non-finite {'loss' if not math.isfinite(losses[-1]) else 'gradient'} at overfit step {bad_step} "
        f"(loss {losses[-1]:.4g}, lr {lr:g}); lower the learning rate or look for a division by zero",
    )
    first, last = losses[0], losses[-1]
    threshold = ratio * first
    fell = finite and last <= threshold
    g.check(
        "loss falls below threshold",
        fell,
        f"{first:.3f} -> {last:.3f} in {len(losses)} steps on {n} fixed examples (threshold {threshold:.3f} = "
        f"{ratio:g}x the start, lr {lr:g})"
        + (
            "; this proves the mechanics, not generalisation"
            if fell
            else f"; the model cannot fit {n} examples it sees at every step"
        ),
    )
    if acc is None:
        g.check(
            "targets recovered",
            True,
            "no predictions to compare (no predict() and no logits in the model's output): judged on the loss alone",
        )
    else:
        share, total, wrong = acc
        g.check(
            "targets recovered",
            share >= need,
            f"{share:.1%} of {total} supervised targets predicted right (threshold {need:.0%})"
            + (f"; examples with a wrong target: {ids_text(wrong)}" if wrong and share < need else ""),
        )
    failed = g.failures()
    if failed:
        g.message = (
            f"overfit failed: {'; '.join(c['name'] + ': ' + c['detail'] for c in failed)}. "
            f"A model that cannot memorise {n} fixed examples will not learn the full data set: check that "
            "its output depends on its input (pooling, masking), the labels, the loss, the learning rate "
            "and frozen parameters before paying for a long run. (Passing proves the mechanics, not generalisation.)"
        )


def _attempt(
    ctx: Context,
    examples: list[dict[str, Any]],
    mbs: list[list[dict[str, Any]]],
    lr: float,
    steps: int,
    ratio: float,
    need: float,
) -> dict[str, Any]:
    base = ctx.trainer
    params = dict(base.params)
    params.update(lr=lr, schedule="constant", warmup_updates=0, weight_decay=0.0, dropout=0.0, accumulation=len(mbs))
    task = dataclasses.replace(base.task, scheduler=None)  # a constant rate: warm-up would starve a 60-step fit
    tr = Trainer(task, params, base.seed, base.device, splits={"train": examples, "val": examples})
    tr.microbatch, tr.accumulation = len(mbs[0]), len(mbs)
    tr.load_data()
    tr.build()  # a fresh model from the task, never a copy of the one being piloted
    for m in tr.model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    losses: list[float] = []
    bad_step = None
    acc: tuple[float, int, list[Any]] | None = None
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
            acc, at = accuracy(tr, examples), step
            if acc is None or acc[0] >= need:
                break
    if bad_step is None and at != len(losses):
        acc = accuracy(tr, examples)  # after the last update
    return {"losses": losses, "bad_step": bad_step, "accuracy": acc}


def _round(x: float) -> float | None:
    return round(x, 5) if math.isfinite(x) else None


@torch.no_grad()
def accuracy(tr: Trainer, examples: list[dict[str, Any]]) -> tuple[float, int, list[Any]] | None:
    """(share of supervised targets predicted right, how many targets, ids with a wrong one); None: no predictions."""
    task = tr.task
    was = tr.model.training
    tr.model.eval()
    right = total = 0
    wrong: list[Any] = []
    try:
        for i in range(0, len(examples), tr.microbatch):
            part = examples[i : i + tr.microbatch]
            batch = tr.collate(part)
            lab = batch.get(task.label_key)
            pred = tr.predictions(batch)
            if pred is None or not torch.is_tensor(lab) or pred.numel() != lab.numel():
                return None
            pred = pred.reshape(lab.shape)
            keep = lab != task.ignore_index
            if task.label_convention == "shift_in_loss" and lab.dim() >= 2:
                keep[:, 0] = False  # nothing predicts the first label: the loss drops it too
            hit = (pred == lab) & keep
            right += int(hit.sum())
            total += int(keep.sum())
            ok = rows(hit | ~keep).all(1).tolist()
            wrong += [e.get("id") for e, o in zip(part, ok, strict=False) if not o]
    finally:
        tr.model.train(was)
    if total == 0:
        return None
    return right / total, total, wrong


def inputs(ctx: Context) -> dict[str, Any]:
    return {
        "examples": int(ctx.pilot_cfg.get("overfit_examples", 16)),
        "steps": int(ctx.pilot_cfg.get("overfit_steps", 60)),
    }


PHASE = Phase(
    "overfit",
    run,
    remedy="the model cannot learn a few fixed examples: check labels, the loss, the learning rate "
    "([pilot] overfit_lr), frozen parameters",
    checks=("finite throughout", "loss falls below threshold", "targets recovered"),
    independent=True,
    inputs=inputs,
    doc="a fresh copy learns a tiny fixed subset",
)
