"""Save: the resume checkpoint holds everything that changes during training, and loads safely."""

from __future__ import annotations

import time

from ... import runs
from .. import checkpoint as ck
from .. import dist as dist_
from ..context import Context
from ..gate import Gate, Phase


def run(ctx: Context, g: Gate) -> None:
    tr = ctx.trainer
    t0 = time.perf_counter()
    trainable_only = bool((ctx.frozen.get("checkpoints") or {}).get("trainable_only"))
    st = tr.state_dict(trainable_only)  # as the series will save it: resume proves frozen weights rebuild alike
    g.inputs["step"] = tr.step
    ctx.saved = {"step": tr.step, "lr": float(tr.optimizer.param_groups[0]["lr"]), "data": tr.order.state()}
    if ctx.dist:  # one file, saved once, with every rank's RNG state
        st["rng_ranks"] = dist_.gather(st["rng"])
        if ctx.rank != 0:
            g.check("saved once, by rank 0", True, "this rank's RNG state is in it")
            return
    size = ck.atomic_save(st, ctx.rdir / runs.CHECKPOINT)
    g.check("written", size > 0, f"{size / 2**20:.2f} MiB in {time.perf_counter() - t0:.2f} s")
    back = ck.safe_load(ctx.rdir / runs.CHECKPOINT)
    want = ["model", "optimizer", "scheduler", "step", "rng", "data"] + (["scaler"] if tr.scaler else [])
    missing = [k for k in want if k not in back or back[k] is None]
    g.check(
        "complete",
        not missing,
        "model, optimizer, scheduler, step, RNG, data position" + (", scaler" if tr.scaler else "")
        if not missing
        else f"missing {missing}",
    )
    g.check("safe to load", True, "torch.load(weights_only=True)")
    g.extra["bytes"] = size
    if trainable_only:
        g.inputs["trainable_only"] = True


PHASE = Phase(
    "save",
    run,
    remedy="fix what is saved (model, optimizer, scheduler, scaler, step, RNG, data position) before the series",
    checks=("written", "complete", "safe to load", "saved once, by rank 0"),
    doc="resume checkpoint: size, time",
)
