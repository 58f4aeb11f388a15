"""Accumulation: the gradient accumulated over microbatches equals the gradient of one batch of them all."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..context import Context
from ..gate import Gate, Phase


def tolerance(ctx: Context) -> float:
    tol = float(ctx.pilot_cfg.get("grad_tolerance", 1e-4))
    if (ctx.params.get("precision") or "fp32") != "fp32":
        tol = max(tol, 2e-2)
    return tol


def run(ctx: Context, g: Gate) -> None:
    tr = ctx.trainer
    tol = tolerance(ctx)
    n = max(tr.accumulation, 2)
    train = tr.splits["train"]
    # microbatches of different lengths: the case a per-microbatch mean gets wrong
    pool = list(train[: min(len(train), 512)])
    length = tr.task.length
    if length is not None:
        pool.sort(key=lambda e: length(e))
    k = n * tr.microbatch
    step = max(1, len(pool) // k)
    chosen = pool[::step][:k]
    if len(chosen) < k:
        g.skipped = True
        g.check("examples", True, f"only {len(chosen)} examples; need {k}", warn=True)
        return
    mbs = [chosen[i * tr.microbatch : (i + 1) * tr.microbatch] for i in range(n)]
    g.inputs.update({"microbatches": n, "microbatch": tr.microbatch, "tolerance": tol})
    if length is not None:
        g.inputs["lengths"] = [[length(e) for e in mb] for mb in mbs]
    modes = {m: m.training for m in tr.model.modules()}
    bn = [m for m in tr.model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    saved_scaler = tr.scaler
    try:
        for m in tr.model.modules():  # dropout off, batch statistics kept as in training
            if not isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.eval()
        tr.scaler = None
        tr.accumulate(mbs)
        acc = [p.grad.detach().clone() if p.grad is not None else None for p in tr.model.parameters()]
        tr.optimizer.zero_grad(set_to_none=True)
        batch = tr.collate([e for mb in mbs for e in mb])
        value, count = tr.loss_of(batch)
        (value / count if count is not None else value).backward()
        single = [p.grad.detach().clone() if p.grad is not None else None for p in tr.model.parameters()]
    finally:
        tr.scaler = saved_scaler
        tr.optimizer.zero_grad(set_to_none=True)
        for m, mode in modes.items():
            m.train(mode)
    num = sum(
        float((a - s).double().pow(2).sum())
        for a, s in zip(acc, single, strict=False)
        if a is not None and s is not None
    )
    den = sum(float(s.double().pow(2).sum()) for s in single if s is not None)
    rel = math.sqrt(num) / max(math.sqrt(den), 1e-30)
    g.extra["relative_difference"] = rel
    how = "(sum, count) normalised over the update" if count is not None else f"mean per microbatch / {n}"
    ok = rel <= tol
    if not ok and (bn or tr.task.batch_statistics):
        g.check(
            "accumulated == single batch",
            False,
            f"differ by {rel:.2e} (relative): legitimate here, the model uses batch statistics "
            f"({len(bn)} BatchNorm layers) that depend on the microbatch",
            warn=True,
        )
        return
    detail = f"relative difference {rel:.2e} (tolerance {tol:.0e}); loss {how}"
    if not ok and count is None:
        detail += (
            ": the loss is a mean per microbatch over items of different counts, so each microbatch "
            "weighs the same whatever its size; return (sum, count) instead"
        )
    g.check("accumulated == single batch", ok, detail)


def inputs(ctx: Context) -> dict[str, Any]:
    return {"accumulation": int(ctx.params.get("accumulation") or 1)}


PHASE = Phase(
    "accumulation",
    run,
    remedy="return (sum, count) from the loss so Cockpit normalises over the whole update, "
    "or divide by the accumulation count",
    checks=("accumulated == single batch", "examples"),
    independent=True,
    inputs=inputs,
    doc="accumulated gradient == single-batch gradient",
)
