"""The first two updates, phase by phase: forward and loss, backward, the first optimizer step, a later one.

The first update is split in three measured phases so a peak is traced to
where it happens: the forward pass of its first microbatch (with the initial
loss against uniform predictions), its backward, and the rest of the update
with the optimizer step (which allocates the optimizer state). The second
update runs with that state resident, which is why it is measured apart.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import torch

from .. import dist as dist_
from .. import outputs
from ..context import Context
from ..gate import Gate, Phase
from ..trainer import NonFinite, user
from . import semantics


def param_fingerprint(model: torch.nn.Module) -> dict[str, tuple[float, float]]:
    with torch.no_grad():
        return {n: (float(p.double().sum()), float(p.double().abs().sum())) for n, p in model.named_parameters()}


def base_inputs(ctx: Context) -> dict[str, Any]:
    p = ctx.params
    return {
        "microbatch": int(p["microbatch"]),
        "accumulation": int(p.get("accumulation") or 1),
        "precision": p.get("precision") or "fp32",
    }


# --------------------------------------------------------------------------- forward


def forward(ctx: Context, g: Gate) -> None:
    ctx.meter.take_baseline()  # before the model loads: what the process and the GPUs hold already
    tr, st = ctx.trainer, ctx.steps
    tr.build()
    n_params = sum(p.numel() for p in tr.model.parameters())
    n_train = sum(p.numel() for n, p in tr.model.named_parameters() if n in tr.trainable_names)
    g.inputs.update({"parameters": n_params, "trainable": n_train})
    st["before"] = param_fingerprint(tr.model)
    mbs = tr.next_microbatches()
    st["mbs"] = mbs
    g.inputs.update(ctx.batch_inputs(mbs[0]))
    g.inputs.update({"optimizer": tr.optimizer_source, "scheduler": tr.scheduler_source})
    tr.model.train()
    tr.optimizer.zero_grad(set_to_none=True)
    batch = tr.collate(mbs[0])
    if tr.ddp is not None and len(mbs) > 1:
        st["no_sync"] = tr.ddp.no_sync()  # not the last microbatch: no all-reduce yet
        st["no_sync"].__enter__()
    with outputs.capture(tr.model) as cap, semantics.dtypes_seen() as dtypes:
        lo = tr.loss_call(batch)
    value, count = lo.value, lo.count
    g.inputs["loss"] = lo.form
    st["value"], st["count"] = value, count
    ok_shape = value.dim() == 0
    g.check(
        "loss is a scalar",
        ok_shape,
        f"shape {tuple(value.shape)}" + ("" if ok_shape else ": reduce it to one number (mean, or sum with a count)"),
    )
    if count is not None:
        g.check("count", float(count) > 0, f"{float(count):g} items count toward the loss")
    v = float(value.detach())
    if not math.isfinite(v):
        raise NonFinite("loss", v, 1)
    mean = v / float(count) if count is not None else v
    g.check("finite loss", True, f"loss {mean:.4f}")
    task = tr.task
    if task.predict is not None and torch.is_tensor(batch.get(task.label_key)):
        with torch.no_grad():
            pred = user("predict", task.predict, tr.model, batch)
        lab = batch[task.label_key]
        shape = tuple(pred.shape) if torch.is_tensor(pred) else type(pred).__name__
        g.check("prediction shape", shape == tuple(lab.shape), f"predictions {shape} vs targets {tuple(lab.shape)}")
    initial_loss(ctx, g, mean)
    semantics.settings_applied(ctx, g, dtypes)
    semantics.outputs_are_logits(ctx, g, cap.logits)
    semantics.causal_mask(ctx, g, batch)


def initial_loss(ctx: Context, g: Gate, loss: float) -> None:
    task = ctx.the_task
    classes, what = None, ""
    if task.kind == "classification" and task.label_names:
        classes, what = len(task.label_names), "classes"
    elif task.kind == "generation" and task.vocab_size:
        classes, what = int(user("vocab_size", task.vocab_size, ctx.params)), "vocabulary"
    if not classes or classes < 2:
        return
    uniform = math.log(classes)
    ratio = loss / uniform
    # Far above uniform: an over-confident start (logits too large, a wrong reduction). Far below: the model
    # already knows the task (fine-tuning learned weights), which is no defect.
    ok = ratio <= 2.0
    learned = ratio < 0.5
    g.extra["initial_loss"] = {"loss": loss, "uniform": uniform, "classes": classes, "ratio": ratio}
    g.check(
        "initial loss near uniform",
        ok,
        f"{loss:.3f} vs ln {classes} = {uniform:.3f} for uniform predictions over the {what} ({ratio:.2f}x)"
        + (
            ": below uniform, the model starts from learned weights"
            if learned
            else ""
            if ok
            else ": far above uniform: an over-confident start; check the output layer's size and initialisation "
            "(logits too large), the loss's reduction and what it is averaged over"
        ),
        warn=True,
    )


# --------------------------------------------------------------------------- backward


def backward(ctx: Context, g: Gate) -> None:
    tr, st = ctx.trainer, ctx.steps
    value, count = st["value"], st["count"]
    n = len(st["mbs"])
    scaled = value if count is not None else value / n
    if tr.scaler is not None:
        scaled = tr.scaler.scale(scaled)
    scaled.backward()
    if "no_sync" in st:
        st.pop("no_sync").__exit__(None, None, None)
    missing, nonfinite, frozen_grad = [], [], []
    for name, p in tr.model.named_parameters():
        if name in tr.trainable_names:
            if p.grad is None:
                missing.append(name)
            elif not bool(torch.isfinite(p.grad).all()):
                nonfinite.append(name)
        elif p.grad is not None:
            frozen_grad.append(name)
    trainable_as_declared(ctx, g)
    total = len(tr.trainable_names)
    g.check(
        "every trainable parameter has a gradient",
        not missing,
        f"{total - len(missing)}/{total}"
        + (f"; none for {', '.join(missing[:4])} (detached from the loss, or unused)" if missing else ""),
    )
    if nonfinite and tr.scaler is None:
        raise NonFinite(f"gradient in {', '.join(nonfinite[:3])}", None, 1)
    g.check(
        "finite gradients",
        not nonfinite or tr.scaler is not None,
        "all finite"
        if not nonfinite
        else f"non-finite in {', '.join(nonfinite[:3])} (the fp16 scaler will skip this step)",
    )
    g.check(
        "frozen parameters get no gradient",
        not frozen_grad,
        "none" if not frozen_grad else f"{', '.join(frozen_grad[:4])} have gradients",
    )
    st["count_total"] = float(count) if count is not None else None
    st["loss_sum"] = float(value.detach()) if count is not None else None
    st["means"] = [float(value.detach())] if count is None else []
    del st["value"]


def trainable_as_declared(ctx: Context, g: Gate) -> None:
    """What trains is what requires grad after build_model; Task.trainable, when given, must say the same."""
    tr = ctx.trainer
    if tr.declared is None:
        return
    extra = sorted(tr.trainable_names - tr.declared)  # require grad, not declared: trained anyway
    frozen = sorted(tr.declared - tr.trainable_names)  # declared, but requires_grad is False
    if not extra and not frozen:
        g.check(
            "trainable as declared",
            True,
            f"the {len(tr.declared)} parameters Task.trainable names, and only they, require grad",
        )
        return
    parts = []
    if extra:
        parts.append(
            f"{len(extra)} parameters require grad after build_model but Task.trainable leaves them out, "
            f"so they would be trained anyway: {_names(extra)}"
        )
    if frozen:
        parts.append(
            f"{len(frozen)} parameters named by Task.trainable do not require grad, so they would not "
            f"train: {_names(frozen)}"
        )
    g.check(
        "trainable as declared",
        False,
        "; ".join(parts) + ". Cockpit trains what requires grad, as your code "
        "does: freeze or unfreeze them in build_model (requires_grad_), or correct Task.trainable",
    )


def _names(names: list[str], k: int = 4) -> str:
    """A few parameter names; when there are many, grouped by their first two components, or, when that
    says nothing (every name under one wrapper, as PEFT's base_model.model), by the name with its layer
    numbers as ``*``."""
    if len(names) <= k:
        return ", ".join(names)
    heads: dict[str, int] = {}
    for n in names:
        head = ".".join(n.split(".")[:2])
        heads[head] = heads.get(head, 0) + 1
    if len(heads) == 1:
        heads = {}
        for n in sorted(names):
            head = ".".join("*" if part.isdigit() else part for part in n.split("."))
            heads[head] = heads.get(head, 0) + 1
        return ", ".join(f"{h} ({c})" for h, c in list(heads.items())[:k]) + (" ..." if len(heads) > k else "")
    return ", ".join(f"{h}.* ({c})" for h, c in list(heads.items())[:k]) + (" ..." if len(heads) > k else "")


# --------------------------------------------------------------------------- the first optimizer step


def update_first(ctx: Context, g: Gate) -> None:
    tr, st = ctx.trainer, ctx.steps
    mbs = st["mbs"]
    n = len(mbs)
    t0 = time.perf_counter()
    for i, mb in enumerate(mbs[1:], start=1):
        batch = tr.collate(mb)
        # under DDP, gradients are all-reduced only on the update's last microbatch
        ctx_ = tr.ddp.no_sync() if (tr.ddp is not None and i < n - 1) else contextlib.nullcontext()
        with ctx_:
            value, count = tr.loss_of(batch)
            v = float(value.detach())
            if not math.isfinite(v):
                raise NonFinite("loss", v, 1)
            if count is None:
                st["means"].append(v)
                scaled = value / n
            else:
                st["loss_sum"] += v
                st["count_total"] += float(count)
                scaled = value
            if tr.scaler is not None:
                scaled = tr.scaler.scale(scaled)
            scaled.backward()
    if tr.scaler is not None:
        tr.scaler.unscale_(tr.optimizer)
    if st["count_total"] is not None:
        for p in tr.model.parameters():
            if p.grad is not None:
                p.grad.div_(tr.reduce_count(st["count_total"]))
        loss = st["loss_sum"] / st["count_total"]
    else:
        loss = sum(st["means"]) / n
    scale_before = tr.scaler.get_scale() if tr.scaler is not None else None
    out = tr.apply()
    skipped = tr.scaler is not None and scale_before is not None and tr.scaler.get_scale() < scale_before
    out.update(step=tr.step, loss=loss, examples=sum(len(m) for m in mbs), duration_s=time.perf_counter() - t0)
    ctx.step_event(out, "update_first")
    after = param_fingerprint(tr.model)
    before = st["before"]
    changed = [n_ for n_ in tr.trainable_names if after[n_] != before[n_]]
    frozen_changed = [n_ for n_ in after if n_ not in tr.trainable_names and after[n_] != before[n_]]
    unchanged = sorted(set(tr.trainable_names) - set(changed))
    # A parameter whose whole gradient was exactly zero in this update cannot move under a plain step: LoRA's A
    # while its partner B is still zero-initialised. It is not a failure here; update_second checks it moved since.
    grads = dict(tr.model.named_parameters())
    zero = [n_ for n_ in unchanged if grads[n_].grad is None or not bool(grads[n_].grad.any())]
    if not skipped:
        st["zero_first"] = {n_: after[n_] for n_ in zero}
        unchanged = [n_ for n_ in unchanged if n_ not in st["zero_first"]]
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
                f"({_names(zero)}: a factor multiplied by a zero-initialised one, as LoRA's A while B is zero); "
                "the next updates must move them"
                if zero
                else ""
            ),
        )
    g.check(
        "frozen parameters unchanged",
        not frozen_changed,
        "unchanged" if not frozen_changed else f"changed: {', '.join(frozen_changed[:4])}",
    )
    base_unchanged(ctx, g, before, after)
    optimizer_state(ctx, g)
    g.check("step counted", tr.step == 1, f"step {tr.step}")
    n_state = len(tr.optimizer.state)
    if not skipped:
        stateless = tr.params.get("optimizer") == "sgd" and not tr.params.get("momentum")
        g.check("optimizer state allocated", n_state > 0 or stateless, f"state for {n_state} parameter tensors")
    optimizer_holds_trainable(ctx, g)
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


def base_unchanged(ctx: Context, g: Gate, before: dict[str, Any], after: dict[str, Any]) -> None:
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
        f"({_names(moved)}): {len(trainable)} base parameters require grad, so the base trains with the adapter, "
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
        f"{_names(missing)}; they get gradients and never change: add them, or freeze them in build_model",
    )
    if frozen:
        g.check(
            "no frozen parameter in the optimizer",
            False,
            f"{len(frozen)} frozen parameters are in the optimizer: {_names(frozen)}; harmless while they get "
            "no gradient, but say the optimizer was built before freezing or over model.parameters()",
            warn=True,
        )


def effective_batch(ctx: Context, g: Gate, micro: int, accum: int) -> None:
    from ...arithmetic import BatchPlan

    declared = int(ctx.params.get("data_replicas") or 1)
    plan = BatchPlan(micro, accum, ctx.world, int(ctx.params.get("model_parallel") or 1))
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
    k = max(1, int(ctx.pilot_cfg.get("timed_updates", 5)))
    times: list[float] = []
    losses: list[float] = []
    for i in range(k):
        t0 = time.perf_counter()
        mbs = tr.next_microbatches()
        if i == 0:
            g.inputs.update(ctx.batch_inputs(mbs[0]))
        out = tr.update(mbs)
        out["duration_s"] = time.perf_counter() - t0
        ctx.step_event(out, "update_second")
        times.append(out["duration_s"])
        losses.append(out["loss"])
    g.inputs["timed_updates"] = k
    g.check("step counted", tr.step == 1 + k, f"step {tr.step}")
    zero_first = ctx.steps.get("zero_first") or {}
    if zero_first:
        now = param_fingerprint(tr.model)
        still = sorted(n for n, fp in zero_first.items() if now[n] == fp)
        g.check(
            "zero-gradient parameters moved since",
            not still,
            f"the {len(zero_first)} parameters whose first gradient was exactly zero changed in the next {k} updates"
            if not still
            else f"{len(still)} trainable parameters never changed in {k + 1} updates, their gradient staying "
            f"zero ({_names(still)}): they are cut off from the loss (detached, multiplied by something that "
            "never moves, or unused); fix the graph or freeze them",
        )
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


def _second_vs_first(ctx: Context, g: Gate, mem: dict[str, Any]) -> None:
    from ... import runs

    p1, p2 = ctx.peak("update_first"), runs.mem_peak(mem)[0]
    if p1 and p2:
        g.extra["peak_vs_first"] = p2 / p1


FORWARD = Phase(
    "forward",
    forward,
    remedy="inspect the reduced batch and its values: shapes, dtype, the loss's reduction",
    checks=("loss is a scalar", "count", "finite loss", "prediction shape", "initial loss near uniform"),
    inputs=base_inputs,
    doc="shapes, finite loss, initial loss vs uniform",
)
BACKWARD = Phase(
    "backward",
    backward,
    remedy="check the graph (detached tensors, frozen parameters), precision and normalisation",
    checks=("every trainable parameter has a gradient", "finite gradients", "frozen parameters get no gradient"),
    inputs=base_inputs,
    doc="finite gradient on every trainable parameter, none on frozen",
)
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
        "finite loss",
        "parameters identical on every rank",
    ),
    inputs=base_inputs,
    after=_second_vs_first,
    doc="a later step: optimizer state resident",
)
