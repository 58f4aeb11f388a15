"""The optimizer steps of the pilot: the first one, which allocates the optimizer state, and later ones.

They follow the forward and backward phases of :mod:`.steps` on the same
microbatches. The second update runs with the optimizer state resident, which
is why it is measured apart from the first: its peak is the steady one, and
its updates are timed for the time per update.
"""

from __future__ import annotations

import math
import time

import torch

from ... import events as ev
from .. import attached
from .. import dist as dist_
from ..context import Context
from ..gate import Gate, Phase
from ..microsteps import Updated
from ..stillness import classify
from . import optimizing, rounding, schedules
from .augmentation import epochs_differ
from .steps import base_inputs, param_fingerprint, short_names

# --------------------------------------------------------------------------- the first optimizer step


def update_first(ctx: Context, g: Gate) -> None:
    tr, first = ctx.trainer, ctx.first_update
    mbs = first.microbatches
    n = len(mbs)
    t0 = time.perf_counter()
    first.accumulation.rest()  # the update's other microbatches, as Trainer.accumulate walks them
    loss = first.accumulation.finish()["loss"]
    scale_before = tr.scaler.get_scale() if tr.scaler is not None else None
    at_zero = optimizing.zero_rate_names(tr)  # a warm-up from 0 steps nothing in its first update
    rounded = rounding.judge(ctx, rounding.sample(ctx))  # bf16/fp16 weights and their gradients, before the step
    applied = tr.apply()
    skipped = tr.scaler is not None and scale_before is not None and tr.scaler.get_scale() < scale_before
    out: Updated = {**applied, "step": tr.step, "loss": loss, "examples": sum(len(m) for m in mbs), "count": None}
    ctx.step_event(out, "update_first", time.perf_counter() - t0)
    after = param_fingerprint(tr.model)
    before = first.before
    changed = [n_ for n_ in tr.trainable_names if after[n_] != before[n_]]
    frozen_changed = [n_ for n_ in after if n_ not in tr.trainable_names and after[n_] != before[n_]]
    unchanged = sorted(set(tr.trainable_names) - set(changed))
    # A parameter whose whole gradient was exactly zero in this update cannot move under a plain step: LoRA's A
    # while its partner B is still zero-initialised. It is not a failure here; update_second checks it moved since.
    still = classify(tr.model.named_parameters(), unchanged)
    zero = still.no_gradient
    resting: list[str] = []
    if not skipped:
        unchanged = [n_ for n_ in unchanged if n_ not in still.cancelled]  # the loss does not depend on them
        first.zero_first = {n_: after[n_] for n_ in zero}
        unchanged = [n_ for n_ in unchanged if n_ not in first.zero_first]
        resting = [n_ for n_ in unchanged if n_ in at_zero]  # "every stepped parameter changed" checks them later
        unchanged = [n_ for n_ in unchanged if n_ not in at_zero]
    if skipped and tr.scaler is not None:
        # fp16: gradients overflowed at the scaler's initial scale, so it skipped this step and
        # halved the scale. Normal for a few steps; a warning, since nothing was updated yet.
        g.check(
            "optimizer step taken",
            False,
            f"the fp16 grad scaler skipped the first step (inf/NaN gradients at scale {scale_before:g}; now "
            f"{tr.scaler.get_scale():g}), so no parameter moved and no optimizer state exists yet; the scaler lowers "
            "its scale until a step is taken. "
            "A sum loss needs a lower training.loss_scale_init (e.g. 1024)",
            warn=True,
        )
    else:
        g.check(
            "targeted parameters changed",
            not unchanged,
            f"{len(changed)}/{len(tr.trainable_names)} changed"
            + (f"; unchanged: {', '.join(unchanged[:4])}" if unchanged else "")
            + (
                f"; {len(zero)} had an exactly zero gradient in this update, so no step could move them "
                f"({short_names(zero)}: a factor multiplied by a zero-initialised one, as LoRA's A while B is zero); "
                "the next updates must move them"
                if zero
                else ""
            )
            + (f"; {still.cancelled_words()}" if still.cancelled else "")
            + (f"; their updates round away ({rounding.NAME})" if unchanged and rounded[0] in ("fail", "warn") else "")
            + (
                f"; {len(resting)} are in groups whose learning rate was 0 at this step ({short_names(resting)}: "
                "a warm-up that starts from 0, as get_linear_schedule_with_warmup's); the next updates must move them "
                "(checked at update_second)"
                if resting
                else ""
            ),
        )
    g.check(
        "frozen parameters unchanged",
        not frozen_changed,
        "unchanged" if not frozen_changed else f"changed: {', '.join(frozen_changed[:4])}",
    )
    base_unchanged(ctx, g, before, after)
    optimizing.adapter_config(ctx, g)
    optimizer_state(ctx, g)
    g.check("step counted", tr.step == 1, f"step {tr.step}")
    n_state = len(tr.optimizer.state)
    if not skipped:
        stateless = tr.settings.optimizer == "sgd" and not tr.settings.momentum
        g.check("optimizer state allocated", n_state > 0 or stateless, f"state for {n_state} parameter tensors")
    optimizer_holds_trainable(ctx, g)
    optimizing.held_outside_model(ctx, g)
    optimizing.weight_decay(ctx, g)
    rounding.check(ctx, g, rounded)
    g.check("gradient accumulation", True, f"{n} microbatches of {len(mbs[0])} per update")
    effective_batch(ctx, g, len(mbs[0]), n)
    if ctx.dist:
        ranks_agree(ctx, g)
        shards = dist_.gather(sorted(str(e.get("id")) for mb in mbs for e in mb))
        overlap: set[str] = set()
        for i, a in enumerate(shards):
            for b in shards[i + 1 :]:
                overlap |= set(a) & set(b)
        g.check(
            "rank shards disjoint",
            not overlap,
            f"{ctx.world} ranks x {len(shards[0])} examples, no id on two ranks"
            if not overlap
            else f"{len(overlap)} examples on several ranks: {sorted(overlap)[:4]}",
        )


def base_unchanged(
    ctx: Context, g: Gate, before: dict[str, tuple[float, ...]], after: dict[str, tuple[float, ...]]
) -> None:
    """Under a PEFT adapter, the base model's weights must not move: the adapter is what trains.

    PEFT freezes the base itself; a base parameter that changed was set trainable again by the
    code around it (unless ``Task.trainable`` names it: training it beside the adapter is then meant).
    """
    ad = ctx.trainer.adapter
    if ad is None or ad.kind != "peft":
        return
    declared = ctx.trainer.declared or set()
    base = [n for n in ad.base_names if n not in declared]
    moved = sorted(n for n in base if after.get(n) != before.get(n))
    trainable = sorted(n for n in base if n in ctx.trainer.trainable_names)
    g.check(
        "base model unchanged",
        not moved,
        f"the {len(base)} base parameters under the PEFT adapter {', '.join(ad.adapters)} did not change; "
        f"{ad.describe()}"
        if not moved
        else f"{len(moved)} parameters of the base model under the PEFT adapter changed in the first update "
        f"({short_names(moved)}): {len(trainable)} base parameters require grad, so the base trains with the adapter, "
        "and an adapter's checkpoint or export would not hold what changed. Keep the base frozen after "
        "get_peft_model (something set requires_grad on it again), or name those parameters in Task.trainable "
        "if training them beside the adapter is meant",
    )


def optimizer_state(ctx: Context, g: Gate) -> None:
    """What the optimizer holds after its first step: state tensors and bytes, for the parameters that train."""
    tr = ctx.trainer
    tensors = [t for s in tr.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    nbytes = sum(int(t.numel()) * t.element_size() for t in tensors)
    trainable = sum(p.numel() for n, p in tr.model.named_parameters() if n in tr.trainable_names)
    total = sum(p.numel() for p in tr.model.parameters())
    g.extra["optimizer_state"] = {
        "parameters_with_state": len(tr.optimizer.state),
        "tensors": len(tensors),
        "bytes": nbytes,
        "trainable_values": trainable,
        "parameter_values": total,
        "adapter": tr.adapter.describe() if tr.adapter is not None else None,
    }


def optimizer_holds_trainable(ctx: Context, g: Gate) -> None:
    """The optimizer (the task's own or Cockpit's) holds every parameter that trains, and no frozen one."""
    tr = ctx.trainer
    held = {id(p) for group in tr.optimizer.param_groups for p in group["params"]}
    named = list(tr.model.named_parameters())
    missing = [n for n, p in named if p.requires_grad and id(p) not in held]
    frozen = [n for n, p in named if not p.requires_grad and id(p) in held]
    g.check(
        "optimizer holds every trainable parameter",
        not missing,
        f"{len(held)} tensors in {len(tr.optimizer.param_groups)} groups ({tr.optimizer_source})"
        if not missing
        else f"{len(missing)} parameters require grad but are in no parameter group of {tr.optimizer_source}: "
        f"{short_names(missing)}; they get gradients and never change: add them, or freeze them in build_model",
    )
    if frozen:
        g.check(
            "no frozen parameter in the optimizer",
            False,
            f"{len(frozen)} frozen parameters are in the optimizer: {short_names(frozen)}; harmless while they get "
            "no gradient, but say the optimizer was built before freezing or over model.parameters(); "
            f"{optimizing.what_trains(tr.model)}: check that this is the set meant to train",
            warn=True,
        )


def effective_batch(ctx: Context, g: Gate, micro: int, accum: int) -> None:
    from ...arithmetic import BatchPlan

    declared = ctx.settings.data_replicas
    plan = BatchPlan(micro, accum, ctx.world, ctx.settings.model_parallel)
    g.inputs["examples_per_update"] = plan.examples_per_update
    if declared == ctx.world:
        g.check("effective batch", True, f"{plan.examples_per_update} = {micro} x {accum} x {ctx.world} replica(s)")
    else:
        ref = BatchPlan(micro, accum, declared).examples_per_update
        g.check(
            "effective batch",
            False,
            f"{plan.examples_per_update} = {micro} x {accum} x {ctx.world} ranks, but the notebook declares "
            f"data_replicas = {declared} ({ref} per update): set [batch] data_replicas = {ctx.world}, "
            f"or divide accumulation by {ctx.world // max(declared, 1) or 1} to keep the experiment",
            warn=True,
        )


def ranks_agree(ctx: Context, g: Gate) -> None:
    prints = dist_.gather(sorted(param_fingerprint(ctx.trainer.model).items()))
    same = all(p == prints[0] for p in prints[1:])
    g.check(
        "parameters identical on every rank",
        same,
        f"{ctx.world} ranks agree" if same else "ranks hold different parameters after the update",
    )


# --------------------------------------------------------------------------- a later update


def update_second(ctx: Context, g: Gate) -> None:
    """Later updates with the optimizer state resident: the steady peak, and the time per update.

    ``[pilot] timed_updates`` of them (5 by default) are timed one by one: the
    median is the time per update, and the spread (min to max) says how far one
    measurement can be trusted (a busy machine widens it).
    """
    tr = ctx.trainer
    k = max(1, ctx.pilot_cfg.timed_updates)
    times: list[float] = []
    losses: list[float] = []
    walks = [attached.walk(tr.model, tr.task)]  # what the first update left, then what each later one leaves
    allocated = [torch.cuda.memory_allocated(ctx.device)] if ctx.device.type == "cuda" else None
    # Read around the timed updates, never inside them: the schedule's count, the scaler's scale, the norm of the
    # gradients the optimizer stepped with, and the parameters before and after the last update.
    counted = schedules.schedule_count(tr)
    scales = [tr.scaler.get_scale()] if tr.scaler is not None else []
    clips: list[optimizing.ClipReading] = []
    last_before: dict[str, tuple[float, ...]] = {}
    norms = optimizing.StepNorms(tr.optimizer) if tr.settings.grad_clip > 0 else None
    for i in range(k):
        if i == k - 1:
            last_before = param_fingerprint(tr.model)
        t0 = time.perf_counter()
        mbs = tr.next_microbatches()
        if i == 0:
            g.inputs.update(ctx.batch_inputs(mbs[0]))
        out = tr.update(mbs)
        took = time.perf_counter() - t0
        ctx.step_event(out, "update_second", took)
        times.append(took)
        losses.append(out["loss"])
        walks.append(attached.walk(tr.model, tr.task))
        if allocated is not None:
            allocated.append(torch.cuda.memory_allocated(ctx.device))
        if norms is not None:
            clips.append(optimizing.ClipReading(tr.step, out["grad_norm"], norms.after_step()))
        if tr.scaler is not None:
            scales.append(tr.scaler.get_scale())
    if norms is not None:
        norms.close()
    g.inputs["timed_updates"] = k
    g.check("step counted", tr.step == 1 + k, f"step {tr.step}")
    skipped_last = len(scales) > 1 and scales[-1] < scales[-2]
    if not skipped_last:
        optimizing.stepped_changed(ctx, g, last_before, param_fingerprint(tr.model), tr.step)
    schedules.schedule_steps(ctx, g, counted, k)
    schedules.schedule_span(ctx, g)
    optimizing.grad_clip(ctx, g, clips)
    optimizing.grad_scaler(ctx, g, scales)
    if ctx.first is not None:
        epochs_differ(ctx, g, ctx.first.microbatches[0])
    zero_first = ctx.first.zero_first if ctx.first is not None else {}
    if zero_first:
        now = param_fingerprint(tr.model)
        still = sorted(n for n, fp in zero_first.items() if now[n] == fp)
        g.check(
            "zero-gradient parameters moved since",
            not still,
            f"the {len(zero_first)} parameters whose first gradient was exactly zero changed in the next {k} updates"
            if not still
            else f"{len(still)} trainable parameters never changed in {k + 1} updates, their gradient staying "
            f"zero ({short_names(still)}): they are cut off from the loss (detached, multiplied by something that "
            "never moves, or unused); fix the graph or freeze them",
        )
    attached.judge(g, walks, ctx.settings.updates, allocated)
    bad = [i + 2 for i, v in enumerate(losses) if not math.isfinite(v)]
    g.check("finite loss", not bad, f"loss {losses[-1]:.4f}" if not bad else f"non-finite at update {bad[0]}")
    if ctx.dist:
        ranks_agree(ctx, g)
    ordered = sorted(times)
    median = (
        ordered[len(ordered) // 2]
        if len(ordered) % 2
        else (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
    )
    g.extra["step_time"] = {
        "median": median,
        "min": ordered[0],
        "max": ordered[-1],
        "n": k,
        "samples": [round(t, 6) for t in times],
    }
    g.extra["first_step_peak"] = ctx.peak("update_first")


def _second_vs_first(ctx: Context, g: Gate, mem: ev.Mem) -> None:
    from ... import runs

    p1, p2 = ctx.peak("update_first"), runs.mem_peak(mem)[0]
    if p1 and p2:
        g.extra["peak_vs_first"] = p2 / p1


UPDATE_FIRST = Phase(
    "update_first",
    update_first,
    remedy="inspect the optimizer: which parameters it holds, their requires_grad, the learning rate",
    checks=(
        "targeted parameters changed",
        "optimizer step taken",
        "frozen parameters unchanged",
        "step counted",
        "optimizer state allocated",
        "base model unchanged",
        "trainable as the adapter's config says",
        "optimizer holds every trainable parameter",
        "no frozen parameter in the optimizer",
        "optimizer holds only the model's parameters",
        "weight decay as configured",
        "weight decay spares biases and norms",
        "gradient accumulation",
        "effective batch",
        "parameters identical on every rank",
        "rank shards disjoint",
    ),
    inputs=base_inputs,
    doc="first optimizer step: allocates optimizer state",
)
UPDATE_SECOND = Phase(
    "update_second",
    update_second,
    remedy="inspect the optimizer and accumulation; compare with the first step's memory",
    checks=(
        "step counted",
        "zero-gradient parameters moved since",
        "every stepped parameter changed",
        "schedule steps once per update",
        "schedule spans the run",
        "gradient clipping acts",
        "grad scaler takes steps",
        "augmentations differ across epochs",
        "finite loss",
        attached.NAME,
        "parameters identical on every rank",
    ),
    inputs=base_inputs,
    after=_second_vs_first,
    doc="a later step: optimizer state resident",
)
