"""What an optimizer step must keep true, measured on the user's own optimizer and scheduler (TrainCheck's kind).

The update gates (:mod:`.updates`) call these around the pilot's updates:

- the optimizer holds only the model's parameters (a tensor beside the model trains, but no clipping, checkpoint
  or export reaches it), and weight decay reaches the groups it is meant for, as the notebook configures it;
- every tensor the optimizer holds that got a non-zero gradient changes in each later update too;
- the learning-rate schedule advances once per update and spans the run (:mod:`.schedules`);
- gradient clipping acts where ``[training] grad_clip`` asks for it: the gradients the optimizer steps with are
  within the bound whenever they were above it;
- the fp16 grad scaler takes steps (a scaler that skips every update trains nothing);
- a PEFT adapter's own config (``modules_to_save``, ``bias``) agrees with what requires grad.

Each states its precondition and records ``not applicable`` where it does not hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .. import tensorscan
from ..context import Context
from ..gate import Gate
from ..stillness import classify
from .steps import short_names

# --------------------------------------------------------------------------- what the optimizer holds


def _held(optimizer: Any) -> list[tuple[int, torch.Tensor]]:
    """(group index, tensor) for every tensor in the optimizer's parameter groups."""
    return [(i, p) for i, group in enumerate(optimizer.param_groups) for p in group["params"]]


def zero_rate_names(tr: Any) -> set[str]:
    """The model's parameters in a group whose learning rate is 0 now (read before a step)."""
    names = {id(p): n for n, p in tr.model.named_parameters()}
    return {
        names[id(p)]
        for i, p in _held(tr.optimizer)
        if id(p) in names and float(tr.optimizer.param_groups[i].get("lr", 1.0)) == 0.0
    }


def what_trains(model: torch.nn.Module) -> str:
    """What requires grad, in words: tensors, values and their share, and the kinds of layer they are in."""
    named = list(model.named_parameters())
    owner: dict[str, str] = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = type(mod).__name__
    train = [(n, p) for n, p in named if p.requires_grad]
    total = sum(p.numel() for _, p in named)
    values = sum(p.numel() for _, p in train)
    kinds = sorted({owner.get(n, "?") for n, _ in train})
    where = (
        f", all in {kinds[0]} layers"
        if len(kinds) == 1
        else f", in {', '.join(kinds[:4])}{' and others' if len(kinds) > 4 else ''} layers"
        if kinds
        else ""
    )
    return (
        f"what trains is {len(train)} of {len(named)} tensors, {values:,} of {total:,} values "
        f"({100 * values / max(total, 1):.2g}%){where}"
    )


def held_outside_model(ctx: Context, g: Gate) -> None:
    """The optimizer steps only the model's parameters: a tensor it holds beside the model (a learnable
    temperature or loss weight kept in the task's module) trains, but is in no checkpoint of the model, no export,
    and out of reach of the clipping over the model's parameters."""
    tr = ctx.trainer
    own = {id(p) for p in tr.model.parameters()}
    outside = [p for _, p in _held(tr.optimizer) if id(p) not in own]
    name = "optimizer holds only the model's parameters"
    if not outside:
        g.check(name, True, f"every tensor in {tr.optimizer_source} is a parameter of the model")
        return
    shapes = ", ".join("a scalar" if p.dim() == 0 else f"shape {tuple(p.shape)}" for p in outside[:4])
    g.check(
        name,
        False,
        f"{tr.optimizer_source} holds {len(outside)} tensor{'s' if len(outside) > 1 else ''} that "
        f"{'are' if len(outside) > 1 else 'is'} not a parameter of the model build_model returns ({shapes}; "
        f"{sum(p.numel() for p in outside):,} values): it trains, but the model's checkpoint and export leave it "
        "out (a resumed run restarts it from its initial value) and gradient clipping over the model's parameters "
        "never reaches it. Make it a parameter of the model (an nn.Parameter attribute of one of its modules)",
        warn=True,
    )


def _kind_of_1d(model: torch.nn.Module) -> dict[str, str]:
    """For every parameter of at most one dimension: "norm" (a normalisation layer's), "bias", or "other"."""
    out: dict[str, str] = {}
    for mname, mod in model.named_modules():
        norm = "norm" in type(mod).__name__.lower()
        for pname, p in mod.named_parameters(recurse=False):
            if p.dim() > 1:
                continue
            full = f"{mname}.{pname}" if mname else pname
            out[full] = "norm" if norm else "bias" if pname.endswith("bias") else "other"
    return out


def weight_decay(ctx: Context, g: Gate) -> None:
    """Weight decay as the notebook configures it, and on the tensors it is meant for.

    Measured from ``optimizer.param_groups``. Two findings, both warnings (each is a choice some make on
    purpose): a task optimizer whose groups ignore ``[training] weight_decay`` (every group at 0, or none at the
    configured value: the setting has no effect), and decay on normalisation weights (with the biases beside them),
    which pulls a LayerNorm's or BatchNorm's gain towards 0 (biases alone decayed, as torch's AdamW default does over
    ``model.parameters()`` of a plain MLP, are said, not warned) (nanoGPT's ``configure_optimizers`` and the Hugging Face Trainer put
    them in a group without decay). Cockpit's own optimizer decays every trainable tensor at the configured rate,
    as ``[training] weight_decay`` documents: said, not warned.
    """
    tr = ctx.trainer
    groups = tr.optimizer.param_groups
    configured = float(ctx.params.get("weight_decay") or 0.0)
    rates = [float(gr.get("weight_decay", 0.0) or 0.0) for gr in groups]
    g.inputs["weight_decay"] = {"configured": configured, "groups": rates}
    name = "weight decay as configured"
    own = tr.task.optimizer is None
    if not any("weight_decay" in gr for gr in groups):
        g.not_applicable(name, f"the groups of {tr.optimizer_source} have no weight_decay setting")
        g.not_applicable("weight decay spares biases and norms", "the optimizer has no weight_decay setting")
        return
    if own:
        g.check(name, True, f"Cockpit's optimizer decays at [training] weight_decay = {configured:g}")
    elif configured > 0 and not any(rates):
        g.check(
            name,
            False,
            f"[training] weight_decay = {configured:g} has no effect: every one of the {len(groups)} groups of "
            f"{tr.optimizer_source} has weight_decay 0. Pass params['weight_decay'] to the optimizer's decay group, "
            "or set [training] weight_decay = 0 to say no decay is meant",
            warn=True,
        )
    elif configured > 0 and not any(math.isclose(r, configured, rel_tol=1e-6) for r in rates):
        g.check(
            name,
            False,
            f"[training] weight_decay = {configured:g} has no effect: the groups of {tr.optimizer_source} decay at "
            f"{', '.join(f'{r:g}' for r in rates)}, which the task sets itself. Build the decay group from "
            "params['weight_decay'], or set the notebook to the rate the task uses",
            warn=True,
        )
    else:
        g.check(
            name,
            True,
            f"groups decay at {', '.join(f'{r:g}' for r in rates)} ([training] weight_decay = {configured:g})",
        )
    kinds = _kind_of_1d(tr.model)
    names = {id(p): n for n, p in tr.model.named_parameters()}
    decayed: dict[str, list[str]] = {"norm": [], "bias": []}
    values = 0
    for i, p in _held(tr.optimizer):
        n = names.get(id(p))
        kind = kinds.get(n or "")
        if n is None or kind not in decayed or rates[i] <= 0 or not p.requires_grad:
            continue
        decayed[kind].append(n)
        values += p.numel()
    name = "weight decay spares biases and norms"
    hit = decayed["norm"] + decayed["bias"]
    if not any(rates):
        g.not_applicable(name, "no group decays (weight_decay 0 in every group)")
    elif not hit:
        g.check(name, True, "no bias or normalisation weight is in a decaying group")
    else:
        what = ", ".join(
            f"{len(v)} {'normalisation weights' if k == 'norm' else 'biases'}" for k, v in decayed.items() if v
        )
        words = (
            f"weight decay {max(rates):g} reaches {what} ({values:,} values: {short_names(hit)}): decay pulls a "
            "LayerNorm's or BatchNorm's gain and every bias towards 0, which is rarely meant"
        )
        if own:
            g.check(
                name,
                True,
                words + "; this is Cockpit's optimizer over every trainable tensor, as [training] weight_decay "
                "documents: hand a Task.optimizer with a group at weight_decay 0 for them to spare them",
            )
        elif not decayed["norm"]:
            g.check(
                name,
                True,
                words + f", in {tr.optimizer_source}; biases alone are a small share of what decays (the harm is a "
                "normalisation layer's gain pulled to 0): said, not warned",
            )
        else:
            g.check(
                name,
                False,
                words + f", in {tr.optimizer_source}. Put parameters of one dimension (biases, norm weights) in "
                "a group with weight_decay 0, as nanoGPT's configure_optimizers and the Hugging Face Trainer do",
                warn=True,
            )


# --------------------------------------------------------------------------- a later update moves what it steps


def _any_nonzero(t: torch.Tensor) -> bool:
    """Whether any element is non-zero, read in chunks (a whole-tensor mask is a byte per element at once)."""
    flat = t.detach().reshape(-1)
    return any(bool(flat[i : i + tensorscan.CHUNK].ne(0).any()) for i in range(0, flat.numel(), tensorscan.CHUNK))


def stepped_changed(
    ctx: Context, g: Gate, before: dict[str, tuple[float, ...]], after: dict[str, tuple[float, ...]], update: int
) -> None:
    """Every tensor the optimizer holds that got a non-zero gradient in this update changed in its step.

    The first update checks it for every trainable tensor ("targeted parameters changed"); this is the same
    invariant one update later, on the user's optimizer with its state and its schedule under way: a group whose
    learning rate is 0 (a schedule that reached 0, a group built with lr 0) or a step masked out moves nothing.
    """
    tr = ctx.trainer
    name = "every stepped parameter changed"
    names = {id(p): n for n, p in tr.model.named_parameters()}
    lr_of: dict[str, float] = {}
    candidates: list[str] = []
    for i, p in _held(tr.optimizer):
        n = names.get(id(p))
        if n is None or n not in before or p.grad is None:
            continue
        if not _any_nonzero(p.grad):
            continue
        lr_of[n] = float(tr.optimizer.param_groups[i].get("lr", 0.0))
        candidates.append(n)
    if not candidates:
        g.not_applicable(name, f"no tensor the optimizer holds had a non-zero gradient in update {update}")
        return
    unchanged = [n for n in candidates if before[n] == after[n]]
    if not unchanged:
        g.check(name, True, f"the {len(candidates)} tensors with a non-zero gradient in update {update} all changed")
        return
    still = classify(tr.model.named_parameters(), unchanged)
    bad = still.unexplained
    if not bad:
        g.check(
            name,
            True,
            f"the {len(candidates)} tensors with a non-zero gradient in update {update} all changed"
            + (f"; {still.cancelled_words()}" if still.cancelled else ""),
        )
        return
    lrs = sorted({lr_of[n] for n in bad})
    zero = all(v == 0 for v in lrs)
    g.check(
        name,
        False,
        f"{len(bad)} of the {len(candidates)} tensors the optimizer holds got a non-zero gradient in update {update} "
        f"and did not change ({short_names(bad)}), at learning rate {', '.join(f'{v:g}' for v in lrs)}: "
        + (
            "their group's rate is 0 (a schedule that reached 0 or a group built with lr 0), so these updates train "
            "nothing there; fix the schedule or the group's lr"
            if zero
            else "the optimizer's step leaves them (a step masked out, or a rate too small to register at their "
            "precision); inspect the optimizer's step for those groups"
        ),
    )


# --------------------------------------------------------------------------- gradient clipping


def held_grad_norm(optimizer: Any) -> torch.Tensor | None:
    """The norm of the gradients of every tensor the optimizer holds, as a tensor on their device (read without
    a synchronisation, so a hook inside a timed update does not wait for the GPU)."""
    grads = [p.grad.detach().float().norm() for _, p in _held(optimizer) if p.grad is not None]
    if not grads:
        return None
    dev = grads[0].device
    return torch.stack([t.to(dev) for t in grads]).norm()


class StepNorms:
    """The norm of the gradients the optimizer steps with, read by a step pre-hook (after Cockpit's clipping,
    before the step: an optimizer that edits its gradients in its own step does not change what is read); an
    optimizer without step hooks is read after its step instead."""

    def __init__(self, optimizer: Any):
        self.optimizer = optimizer
        self.seen: list[torch.Tensor | None] = []
        self.read = 0
        register = getattr(optimizer, "register_step_pre_hook", None)
        self.handle = (
            register(lambda opt, args, kwargs: self.seen.append(held_grad_norm(opt))) if callable(register) else None
        )

    def after_step(self) -> float:
        """The last update's norm as a float (0 when no tensor held a gradient)."""
        if self.handle is None:
            self.seen.append(held_grad_norm(self.optimizer))
        fresh = len(self.seen) > self.read  # the fp16 scaler skips a step with inf gradients: no hook ran
        self.read = len(self.seen)
        last = self.seen[-1] if fresh else None
        return float(last) if last is not None else 0.0

    def close(self) -> None:
        if self.handle is not None:
            self.handle.remove()


@dataclass
class ClipReading:
    """One update's gradient norm before Cockpit clipped it (over the model's parameters) and the norm of what
    the optimizer held after its step."""

    update: int
    before: float | None
    held: float


def grad_clip(ctx: Context, g: Gate, readings: list[ClipReading]) -> None:
    """Where ``[training] grad_clip`` is set, the gradients the optimizer stepped with are within the bound in every
    update whose gradient norm was above it."""
    tr = ctx.trainer
    name = "gradient clipping acts"
    bound = tr.settings.grad_clip
    if bound <= 0:
        g.not_applicable(name, "no clipping is configured ([training] grad_clip is 0)")
        return
    g.extra["grad_clip"] = {
        "bound": bound,
        "before": [r.before for r in readings],
        "held": [r.held for r in readings],
    }
    above = [r for r in readings if r.before is not None and r.before > bound]
    over = [r for r in readings if r.held > bound * (1 + 1e-3) + 1e-12]
    if over:
        worst = max(over, key=lambda r: r.held)
        own = {id(p) for p in tr.model.parameters()}
        outside = [p for _, p in _held(tr.optimizer) if id(p) not in own and p.grad is not None]
        cause = (
            f"{len(outside)} of the tensors the optimizer holds {'are' if len(outside) > 1 else 'is'} not a "
            "parameter of the model, and clipping over the model's parameters never reaches it: make it one of "
            "the model's parameters"
            if outside
            else "something gives the optimizer's tensors their gradients after the clipping (the optimizer's own "
            "step, or a hook): clip where the step reads them"
        )
        g.check(
            name,
            False,
            f"[training] grad_clip = {bound:g}, but in {len(over)} of {len(readings)} updates the optimizer stepped "
            f"with gradients of norm {worst.held:.4g} (update {worst.update}, "
            f"{'before clipping ' + format(worst.before, '.4g') if worst.before is not None else 'not finite'}): "
            f"{cause}",
        )
        return
    if not above:
        most = max((r.before for r in readings if r.before is not None), default=0.0)
        g.not_applicable(
            name,
            f"the gradient norm stayed within the bound {bound:g} in the pilot's {len(readings)} updates "
            f"(at most {most:.4g}), so clipping had nothing to do yet",
        )
        return
    top = max(above, key=lambda r: r.before or 0.0)
    g.check(
        name,
        True,
        f"clipped in {len(above)} of {len(readings)} updates: norm {top.before:.4g} -> {top.held:.4g} "
        f"(bound {bound:g})",
    )


# --------------------------------------------------------------------------- the fp16 grad scaler


def grad_scaler(ctx: Context, g: Gate, scales: list[float]) -> None:
    """Under fp16, the grad scaler scales the loss and takes steps: one that skips every update (inf or NaN
    gradients at every scale it tries) trains nothing. ``scales``: its scale before the updates and after each."""
    tr = ctx.trainer
    name = "grad scaler takes steps"
    if tr.precision != "fp16":
        g.not_applicable(
            name, f"precision {tr.precision or 'fp32'}: only fp16 needs a loss scale (bf16 keeps fp32's range)"
        )
        return
    if tr.scaler is None or len(scales) < 2:
        g.check(name, False, "precision fp16 without a grad scaler: small gradients underflow to 0")
        return
    skipped = sum(1 for a, b in zip(scales, scales[1:], strict=False) if b < a)
    n = len(scales) - 1
    g.extra["grad_scaler"] = {"scales": scales, "skipped": skipped}
    if skipped == n:
        g.check(
            name,
            False,
            f"the fp16 grad scaler skipped all {n} updates (inf or NaN gradients at every scale from {scales[0]:g} "
            f"to {scales[-1]:g}), so nothing trained: the loss overflows fp16 (a sum over many items: return "
            "(sum, count) or a mean), or lower training.loss_scale_init",
        )
        return
    g.check(
        name,
        True,
        f"scale {scales[0]:g} -> {scales[-1]:g}; {skipped} of {n} updates skipped while the scale settled",
    )


# --------------------------------------------------------------------------- a PEFT adapter's own config


def adapter_config(ctx: Context, g: Gate) -> None:
    """What requires grad agrees with the PEFT adapter's own config: the copies of ``modules_to_save`` train,
    and the biases train as its ``bias`` setting says ("all": every bias; "none": none of the base's)."""
    tr = ctx.trainer
    ad = tr.adapter
    name = "trainable as the adapter's config says"
    if ad is None or ad.kind != "peft":
        return
    configs = getattr(tr.model, "peft_config", {})
    named = [(n, p) for n, p in tr.model.named_parameters()]
    declared = tr.declared or set()
    found: list[str] = []
    for adapter, pc in configs.items():
        saved = getattr(pc, "modules_to_save", None) or []
        for m in saved:
            copies = [(n, p) for n, p in named if f".{m}.modules_to_save.{adapter}." in f".{n}"]
            frozen = [n for n, p in copies if not p.requires_grad]
            if not copies:
                continue
            if frozen:
                total = sum(p.numel() for _, p in named)
                train = sum(p.numel() for _, p in named if p.requires_grad)
                found.append(
                    f"adapter {adapter!r} lists {m!r} in modules_to_save, so its copy should train, but {len(frozen)} "
                    f"of its {len(copies)} tensors {'does' if len(frozen) == 1 else 'do'} not require grad ({short_names(frozen)}); what trains is "
                    f"{sum(1 for _, p in named if p.requires_grad)} of {len(named)} tensors, {train:,} of {total:,} "
                    f"values ({100 * train / max(total, 1):.2g}%)"
                )
        bias = getattr(pc, "bias", None)
        biases = [(n, p) for n, p in named if n.endswith("bias") and n in ad.base_names]
        if bias == "all" and biases:
            frozen = [n for n, p in biases if not p.requires_grad]
            if frozen:
                found.append(
                    f"adapter {adapter!r} has bias='all', so every bias should train, but {len(frozen)} of "
                    f"{len(biases)} do not require grad ({short_names(frozen)})"
                )
        elif bias == "none" and biases:
            trains = [n for n, p in biases if p.requires_grad and n not in declared]
            if trains:
                found.append(
                    f"adapter {adapter!r} has bias='none', but {len(trains)} biases of the base require grad "
                    f"({short_names(trains)})"
                )
    if not found:
        g.check(name, True, f"what requires grad is what {', '.join(ad.adapters)}'s config trains; {ad.describe()}")
        return
    g.check(
        name,
        False,
        "; ".join(found)
        + ". Something after get_peft_model changed requires_grad (a name filter such as `'lora_' in name`); "
        "leave the trainable set to PEFT, or change the config to say what is meant",
    )
