"""The first update's forward and backward, phase by phase, and the helpers the update phases share.

The first update is split in three measured phases so a peak is traced to
where it happens: the forward pass of its first microbatch (with the initial
loss against uniform predictions), its backward, and the rest of the update
with the optimizer step (which allocates the optimizer state). The first two
are here; the optimizer steps are in :mod:`.updates`, which uses the
parameter fingerprints, the phases' inputs and the short lists of parameter
names defined here.
"""

from __future__ import annotations

import math

import torch

from ... import blame
from ... import events as ev
from ...contract import Batch
from .. import frozenmode, loads, outputs, seeding, tensorscan, unregistered
from ..context import Context
from ..gate import Gate, Phase
from ..microsteps import Accumulation, FirstUpdate
from ..outputs import LossOut
from ..trainer import NonFinite, user
from . import lossinit, lossterms, reach, semantics


def param_fingerprint(model: torch.nn.Module, chunk: int = tensorscan.CHUNK) -> dict[str, tuple[float, ...]]:
    """Per parameter: :func:`cockpit.pilot.tensorscan.fingerprint`, read in chunks: a whole-tensor float64 copy
    cost 16 bytes per element at once, after the optimizer step, so a GPT-2 embedding added 0.6 GB to
    update_first's measured peak, and a 10-billion-element tensor ran out of memory in the check."""
    return dict(tensorscan.fingerprint(model.named_parameters(), chunk))


def base_inputs(ctx: Context) -> dict[str, ev.JSON]:
    s = ctx.settings
    return {"microbatch": s.microbatch, "accumulation": s.accumulation, "precision": s.precision}


# --------------------------------------------------------------------------- forward


def forward(ctx: Context, g: Gate) -> None:
    ctx.meter.take_baseline()  # before the model loads: what the process and the GPUs hold already
    tr = ctx.trainer
    tr.build(allow_frozen=True)  # nothing requiring grad is the backward gate's finding, not a crash here
    n_params = sum(p.numel() for p in tr.model.parameters())
    n_train = sum(p.numel() for n, p in tr.model.named_parameters() if n in tr.trainable_names)
    g.inputs.update({"parameters": n_params, "trainable": n_train})
    verdict, words = loads.judge(tr.loads)
    if verdict == "na":
        g.not_applicable(loads.NAME, words)
    else:
        g.check(loads.NAME, verdict == "pass", words, warn=verdict == "warn")
    verdict, words = seeding.judge(tr.seeded, blame.defined_at(tr.task.build_model))
    if verdict != "na":
        g.check(seeding.NAME, verdict == "pass", words)
    before = param_fingerprint(tr.model)
    mbs = tr.next_microbatches()
    g.inputs.update(ctx.batch_inputs(mbs[0]))
    g.inputs.update({"optimizer": tr.optimizer_source, "scheduler": tr.scheduler_source})
    tr.model.train()
    if tr.optimizer is not None:
        tr.optimizer.zero_grad(set_to_none=True)
    acc = Accumulation(tr, mbs)
    ctx.first = FirstUpdate(before=before, microbatches=mbs, accumulation=acc)
    held = unregistered.held([tr.model])  # what the model holds before forward runs
    with (
        outputs.capture(tr.model) as cap,
        semantics.dtypes_seen() as dtypes,
        frozenmode.recorder(tr.model, tr.trainable_names) as frozen_calls,
    ):
        taken = acc.forward()  # under DDP's no_sync until its backward, when the update has more microbatches
    batch, lo = taken.batch, taken.loss
    value, count = lo.value, lo.count
    if isinstance(value, torch.Tensor) and value.grad_fn is not None:
        try:  # an extra measurement: whatever stops it leaves the check not applicable, never the phase failed
            ctx.first_update.strays = unregistered.strays([tr.model], value, [tr.optimizer], held)
        except Exception:
            ctx.first_update.strays = None
    g.inputs["loss"] = lo.form
    ok_shape = value.dim() == 0
    g.check(
        "loss is a scalar",
        ok_shape,
        "shape ()" if ok_shape else not_scalar(value),
    )
    if value.numel() != 1:  # no one number to judge: the later checks of this gate would only read it wrong
        acc.close()
        return
    if count is not None:
        g.check("count", float(count) > 0, f"{float(count):g} items count toward the loss")
        if not float(count) > 0:  # nothing to divide by: the mean the later checks read does not exist
            acc.close()
            return
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
    if not lo.terms:
        lo.terms = cap.terms  # the model's output names them where the loss returned only the total
    initial_loss(ctx, g, lo, mean, batch, cap.logits)
    semantics.settings_applied(ctx, g, dtypes)
    semantics.outputs_are_logits(ctx, g, cap.logits)
    semantics.causal_mask(ctx, g, batch)
    reach.check(ctx, g, batch)
    frozenmode.judge(
        g, tr.model, tr.trainable_names, frozen_calls, lambda: tr.loss_call(batch, net=tr.model).value, tr.autocast
    )


def not_scalar(value: torch.Tensor) -> str:
    """The words for a loss that is not one number (a per-example loss left unreduced)."""
    return (
        f"the loss is not a scalar: shape {tuple(value.shape)}; reduce it with .mean() "
        "(or return (sum, count) for a sum over items)"
    )


def initial_loss(ctx: Context, g: Gate, lo: LossOut, loss: float, batch: Batch, logits: torch.Tensor | None) -> None:
    """The loss at initialisation against what the objective implies (:mod:`.lossinit`), and each of its named
    terms on its own (:mod:`.lossterms`)."""
    mean = lo.value / lo.count if lo.count is not None else lo.value
    im = lossinit.check(ctx, g, loss, batch, logits, mean, sorted(lo.terms))
    where = blame.defined_at(ctx.the_task.loss)
    lossterms.at_init(g, lo, loss, im.main if im is not None else None, where)


# --------------------------------------------------------------------------- backward


def backward(ctx: Context, g: Gate) -> None:
    tr, first = ctx.trainer, ctx.first_update
    acc = first.accumulation
    if tr.nothing_trains:
        acc.close()
        g.fail("something trains", tr.nothing_trains)
        g.message = f"nothing to train: {tr.nothing_trains}"
        return
    acc.backward()
    missing, nonfinite, frozen_grad = [], [], []
    for name, p in tr.model.named_parameters():
        if name in tr.trainable_names:
            if p.grad is None:
                missing.append(name)
            elif not tensorscan.all_finite(p.grad):
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
    strays = first.strays
    if strays is None:
        g.not_applicable(unregistered.NAME, "the first loss has no graph to follow")
    elif strays:
        g.check(unregistered.NAME, False, unregistered.describe(strays))
    else:
        g.check(
            unregistered.NAME, True, f"every tensor the loss trains is one of the model's {total} trainable parameters"
        )


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
            f"so they would be trained anyway: {short_names(extra)}"
        )
    if frozen:
        parts.append(
            f"{len(frozen)} parameters named by Task.trainable do not require grad, so they would not "
            f"train: {short_names(frozen)}"
        )
    g.check(
        "trainable as declared",
        False,
        "; ".join(parts) + ". Cockpit trains what requires grad, as your code "
        "does: freeze or unfreeze them in build_model (requires_grad_), or correct Task.trainable",
    )


def short_names(names: list[str], k: int = 4) -> str:
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


FORWARD = Phase(
    "forward",
    forward,
    remedy="inspect the reduced batch and its values: shapes, dtype, the loss's reduction",
    checks=(
        "loss is a scalar",
        "count",
        "finite loss",
        "prediction shape",
        lossinit.NAME,
        lossterms.AT_INIT,
        frozenmode.NAME,
        loads.NAME,
    ),
    inputs=base_inputs,
    doc="shapes, finite loss, initial loss vs what the objective implies, the weights build_model loaded",
)
BACKWARD = Phase(
    "backward",
    backward,
    remedy="check the graph (detached tensors, frozen parameters), precision and normalisation",
    checks=(
        "something trains",
        "every trainable parameter has a gradient",
        "finite gradients",
        "frozen parameters get no gradient",
        unregistered.NAME,
    ),
    inputs=base_inputs,
    doc="finite gradient on every trainable parameter, none on frozen, none outside the model's parameters",
)
