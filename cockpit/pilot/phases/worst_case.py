"""Worst case: a full update on the largest batch the campaign can produce."""

from __future__ import annotations

import math
import time

from ... import events as ev
from ...contract import Example
from ..context import Context
from ..gate import Gate, Phase


def worst_batch(ctx: Context) -> list[Example]:
    tr = ctx.trainer
    train = tr.splits["train"]
    length = tr.task.length
    ranked = sorted(train, key=lambda e: length(e), reverse=True) if length is not None else list(train)
    return ranked[: tr.microbatch]


def run(ctx: Context, g: Gate) -> None:
    tr = ctx.trainer
    worst = worst_batch(ctx)
    g.inputs.update(ctx.batch_inputs(worst))
    t0 = time.perf_counter()
    out = tr.update([worst] * tr.accumulation)
    ctx.step_event(out, "worst_case", time.perf_counter() - t0)
    g.check("finite loss", math.isfinite(out["loss"]), f"loss {out['loss']:.4f}")
    g.extra["typical_peak"] = ctx.peak("update_second")


def _vs_typical(ctx: Context, g: Gate, mem: ev.Mem) -> None:
    from ... import runs

    w, t = runs.mem_peak(mem)[0], ctx.peak("update_second")
    if w and t:
        g.extra["worst_vs_typical"] = w / t


def inputs(ctx: Context) -> dict[str, ev.JSON]:
    return {"accumulation": ctx.settings.accumulation}


PHASE = Phase(
    "worst_case",
    run,
    remedy="the longest batch does not fit: lower the microbatch and raise accumulation, "
    "enable activation checkpointing or bf16, or shorten max_length (and check what that truncates)",
    checks=("finite loss",),
    inputs=inputs,
    after=_vs_typical,
    doc="a full update on the largest batch the campaign can produce",
)
