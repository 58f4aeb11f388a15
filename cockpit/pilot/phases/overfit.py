"""Overfit: a fresh copy of the model learns a tiny fixed subset (the mechanics work, not generalisation)."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..context import Context
from ..datascan import ids_text, rows
from ..gate import Gate, Phase
from ..trainer import Trainer, UserCodeError, rng_state, set_rng_state, user


def run(ctx: Context, g: Gate) -> None:
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
    cfg = ctx.pilot_cfg
    base = ctx.trainer
    task = base.task
    n_want = min(max(int(cfg.get("overfit_examples", 16)), 8), 32)
    steps = min(max(int(cfg.get("overfit_steps", 60)), 1), 2000)
    ratio = float(cfg.get("overfit_loss_ratio", 0.1))
    train = list(base.splits["train"])
    scans = ctx.scans
    empty: set[Any] = set()
    if "train" in scans:
        empty = {i for i, k in zip(scans["train"].ids, scans["train"].supervised, strict=True) if k == 0}
    examples = [e for e in train if e.get("id") not in empty][:n_want]
    if len(examples) < min(n_want, 8):
        examples = train[:n_want]
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
        attempt = _overfit_attempt(ctx, examples, mbs, lr, steps, ratio)
        diverged = attempt["bad_step"] is not None or attempt["losses"][-1] > attempt["losses"][0]
        if diverged and lr > campaign_lr and not task.extras.get("overfit_lr"):
            g.extra["overfit_retry"] = {
                "lr": lr,
                "steps": len(attempt["losses"]),
                "last": _round(attempt["losses"][-1]),
            }
            lr = lr / 10
            g.inputs["lr"] = lr
            attempt = _overfit_attempt(ctx, examples, mbs, lr, steps, ratio)
    finally:
        set_rng_state(saved_rng)  # the piloted run's random stream is left as it was
    losses, bad_step, recovered = attempt["losses"], attempt["bad_step"], attempt["recovered"]
    finite = bad_step is None
    every = max(1, len(losses) // 20)
    g.extra["overfit"] = {
        "losses": [_round(x) for x in losses[::every]] + ([_round(losses[-1])] if (len(losses) - 1) % every else []),
        "steps": len(losses),
        "examples": n,
        "lr": lr,
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
    if task.predict is None:
        g.check(
            "targets recovered",
            False,
            "the task has no predict(): predictions were not compared with the targets",
            warn=True,
        )
    elif recovered is not None:
        share, wrong = recovered
        g.check(
            "targets recovered",
            share >= 1.0,
            f"predictions match every target of the {n} examples"
            if share >= 1.0
            else f"{share:.0%} of the {n} examples predicted exactly; wrong: {ids_text(wrong)}",
        )
    failed = [c for c in g.checks if not c["ok"] and not c.get("warn")]
    if failed:
        g.message = (
            f"overfit failed: {'; '.join(c['name'] + ': ' + c['detail'] for c in failed)}. "
            f"A model that cannot memorise {n} fixed examples will not learn the full data set: check that "
            "its output depends on its input (pooling, masking), the labels, the loss, the learning rate "
            "and frozen parameters before paying for a long run. (Passing proves the mechanics, not generalisation.)"
        )


def _overfit_attempt(
    ctx: Context, examples: list[dict[str, Any]], mbs: list[list[dict[str, Any]]], lr: float, steps: int, ratio: float
) -> dict[str, Any]:
    base = ctx.trainer
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
                raise UserCodeError(
                    "predict",
                    ValueError(
                        f"returned {tuple(pred.shape) if torch.is_tensor(pred) else type(pred).__name__}, targets are {tuple(lab.shape)}"
                    ),
                )
            pred = pred.reshape(lab.shape)
            keep = lab != task.ignore_index
            ok = rows((pred == lab) | ~keep).all(1).tolist()
            wrong += [e.get("id") for e, o in zip(part, ok, strict=False) if not o]
    finally:
        tr.model.train(was)
    return 1.0 - len(wrong) / max(len(examples), 1), wrong


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
