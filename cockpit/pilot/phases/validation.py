"""Validation: eval mode, no grad, the whole split with its longest batch first, complete and deterministic outputs."""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from ... import events as ev
from .. import inspection
from ..context import Context
from ..gate import Gate, Phase
from ..predictions import predict_pass


def run(ctx: Context, g: Gate) -> None:
    tr = ctx.trainer
    val = list(tr.splits["val"])
    length = tr.task.length
    if length is not None:
        val.sort(key=lambda e: length(e), reverse=True)  # the longest batch first
        g.inputs["longest"] = length(val[0]) if val else 0
    g.inputs.update({"examples": len(val), "eval_microbatch": tr.eval_microbatch})
    modes: list[bool] = []
    grad: list[bool] = []

    def spy(module: Any, args: Any) -> None:
        modes.append(module.training)
        grad.append(torch.is_grad_enabled())

    training_in_eval: set[str] = set()
    names = {id(m): n or type(m).__name__ for n, m in tr.model.named_modules()}

    def still_training(module: Any, args: Any) -> None:
        if module.training and id(module) in names:
            training_in_eval.add(names[id(module)])

    hook = tr.model.register_forward_pre_hook(spy)
    every = torch.nn.modules.module.register_module_forward_pre_hook(still_training)
    try:
        out = tr.evaluate("val", val)
        again = tr.evaluate("val", val[: tr.eval_microbatch])
        first = tr.evaluate("val", val[: tr.eval_microbatch])
    finally:
        hook.remove()
        every.remove()
    g.check(
        "eval mode",
        bool(modes) and not any(modes),
        "model.eval() during validation" if not any(modes) else "model was in training mode",
    )
    g.check("no grad", not any(grad), "torch.no_grad()" if not any(grad) else "gradients were recorded")
    ids = out["ids"]
    want = [e["id"] for e in val]
    dup = len(ids) - len(set(ids))
    missing = set(want) - set(ids)
    g.check(
        "complete outputs",
        out["n"] == len(val) and not missing and not dup,
        f"{out['n']}/{len(val)} examples evaluated"
        + (f"; missing {sorted(missing)[:4]}" if missing else "")
        + (f"; {dup} duplicated" if dup else ""),
    )
    g.check("finite loss", math.isfinite(out["loss"]), f"val loss {out['loss']:.4f}")
    same = again["loss"] == first["loss"]
    if same:
        g.check("deterministic", True, "same loss twice (dropout off)")
    else:
        who = (
            f"modules left in training mode inside eval(): {', '.join(sorted(training_in_eval)[:4])}"
            if training_in_eval
            else "no module is in training mode, so the randomness is in the code itself "
            "(functional dropout with training=True, noise or sampling in forward, a random collate)"
        )
        g.check(
            "deterministic",
            False,
            f"two evaluations of the same batch differ ({first['loss']:.6g} vs "
            f"{again['loss']:.6g}): {who}; validation figures then move between runs for no reason",
        )
    g.check("training mode restored", tr.model.training, "back in train mode")
    # the prediction pass every validation of a training run makes, timed here so the first one holds no surprise
    t0 = time.perf_counter()
    metrics, rows = predict_pass(tr)
    g.extra["predictions"] = {"rows": len(rows), "seconds": round(time.perf_counter() - t0, 4), "metrics": metrics}
    generated = [r for r in rows if "generated" in r]
    if generated:
        g.extra["predictions"]["generated"] = len(generated)
        g.extra["generated"] = [
            {k: r.get(k) for k in ("id", "input", "target", "generated") if r.get(k) is not None} for r in generated[:3]
        ]
        if ctx.rank == 0:
            inspection.add_generated(ctx)  # the data view shows it beside the target
    g.extra["val_loss"] = out["loss"]
    ctx.emit(
        ev.EVAL,
        step=tr.step,
        loss=ev.finite_or_none(out["loss"]),
        metrics={k: ev.finite_or_none(v) for k, v in metrics.items()},
    )


PHASE = Phase(
    "validation",
    run,
    remedy="separate validation settings from training's: eval mode, no grad, its own microbatch",
    checks=("eval mode", "no grad", "complete outputs", "finite loss", "deterministic", "training mode restored"),
    doc="eval mode, no grad, whole split, complete outputs",
)
