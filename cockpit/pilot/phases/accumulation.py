"""Accumulation: the gradient accumulated over microbatches equals the gradient of one batch of them all.

Measured on the user's model as training runs it, with dropout switched off:
every module except the BatchNorm layers is put in eval mode *one by one*
(``module.training = False``, never ``eval()`` on a parent, which would recurse
into BatchNorm), so BatchNorm keeps its batch statistics while dropout modules
and functional dropout (attention dropout) stop. When the two gradients
differ, the gate measures the cause instead of guessing it:

- *randomness*: the same batch twice gives different gradients (a random
  collate, functional dropout): no comparison can be exact; a warning with the
  size of that noise;
- *batch statistics*: with the BatchNorm layers frozen the two agree; a
  warning with the size of the difference (legitimate, but the accumulated
  update is not the big batch's);
- *a mean per microbatch over uneven counts*: weighting each microbatch by its
  number of supervised items makes them agree; a failure (return ``(sum,
  count)``, or weigh the loss yourself);
- *a batch-level term*: the same input gives the same loss, yet the loss of
  the whole batch is not the (count-weighted) mean of its microbatches' losses,
  measured under one replayed RNG state: the objective does not decompose over
  examples (in-batch negatives of a contrastive loss, a mixture-of-experts
  router's load-balancing loss, statistics of the batch). Expected for such an
  objective, and how it is trained under accumulation everywhere: a pass with
  the effect's size when the task declares it (``Task.batch_level_loss`` or
  ``Task.batch_statistics``) or the model's output names it (a router's
  ``aux_loss``, CLIP's ``logits_per_image``), else a warning naming it;
- otherwise a failure that says no cause was found.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypedDict

import torch
from torch import nn

from ... import events as ev
from ...contract import Example
from .. import carried, outputs
from ..context import Context
from ..gate import Gate, Phase
from ..microsteps import Accumulated
from ..rng import RngState, rng_state, set_rng_state
from ..trainer import Trainer

DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
BATCHNORM = (nn.modules.batchnorm._BatchNorm, nn.SyncBatchNorm)


def tolerance(ctx: Context) -> float:
    tol = ctx.pilot_cfg.grad_tolerance
    if ctx.settings.precision != "fp32":
        tol = max(tol, 2e-2)
    return tol


Grads = list[torch.Tensor | None]


def _grads(tr: Trainer, fn: Callable[[], Any]) -> Grads:
    tr.optimizer.zero_grad(set_to_none=True)
    fn()
    out = [p.grad.detach().clone() if p.grad is not None else None for p in tr.model.parameters()]
    tr.optimizer.zero_grad(set_to_none=True)
    return out


def _relative(a: Grads, b: Grads) -> float:
    num = sum(
        float((x - y).double().pow(2).sum()) for x, y in zip(a, b, strict=True) if x is not None and y is not None
    )
    den = sum(float(y.double().pow(2).sum()) for y in b if y is not None)
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def _single(tr: Trainer, mbs: list[list[Example]]) -> None:
    batch = tr.collate([e for mb in mbs for e in mb])
    value, count = tr.loss_of(batch)
    (value / count if count is not None else value).backward()


def _counts(ctx: Context, mbs: list[list[Example]]) -> list[int]:
    """Supervised items per microbatch, as the task's loss counts them."""
    tr, task = ctx.trainer, ctx.the_task
    out = []
    for mb in mbs:
        lab = tr.collate(mb).get(task.label_key)
        if not torch.is_tensor(lab):
            return []
        if task.label_convention == "shift_in_loss" and lab.dim() >= 2:
            lab = lab[:, 1:]
        out.append(int((lab != task.ignore_index).sum()))
    return out


def _loss_value(tr: Trainer, examples: list[Example], start: RngState) -> tuple[float, float | None]:
    """(value, count) of the loss on these examples under the RNG state ``start`` (no gradient)."""
    set_rng_state(start)
    with torch.no_grad():
        value, count = tr.loss_of(tr.collate(examples))
    return float(value.detach().double()), (float(count) if count is not None else None)


def _combined(parts: list[tuple[float, float | None]], weights: list[float]) -> float:
    """What one batch would give if the loss decomposed over items: the parts' (weighted) mean."""
    if all(c is not None for _, c in parts):
        return sum(v for v, _ in parts) / max(sum(float(c or 0.0) for _, c in parts), 1e-30)
    return sum(v * w for (v, _), w in zip(parts, weights, strict=True)) / max(sum(weights), 1e-30)


class Found(TypedDict, total=False):
    """What the accumulation gate measured, for its verdict to explain a difference by."""

    count_form: bool  # the loss came as (sum, count)
    noise: float  # two single-batch gradients apart
    seeded: bool  # that randomness replays under the seed
    carried: list[str]  # state the model carries from call to call
    frozen: float  # the difference with BatchNorm's statistics frozen
    counts: list[int]  # supervised items per microbatch
    weighted: float  # the difference with each microbatch weighed by its count
    decomposition: ev.Decomposition


def decomposition(tr: Trainer, mbs: list[list[Example]], counts: list[int]) -> ev.Decomposition:
    """Does the loss decompose over examples? The whole batch's loss against its microbatches' combined, each
    under the same replayed RNG state (with dropout off, nothing random is left to differ), and the noise floor
    of the arithmetic (the whole batch in reverse order: a decomposing loss gives the same up to rounding)."""
    start = rng_state()
    whole = [e for mb in mbs for e in mb]
    with outputs.capture(tr.model) as cap:
        value, count = _loss_value(tr, whole, start)
    one = value / count if count is not None else value
    parts = [_loss_value(tr, mb, start) for mb in mbs]
    weights = [float(c) for c in counts] if counts and sum(counts) > 0 else [float(len(mb)) for mb in mbs]
    value_r, count_r = _loss_value(tr, whole[::-1], start)
    reverse = value_r / count_r if count_r is not None else value_r
    scale = max(abs(one), 1e-12)
    return {
        "whole": one,
        "combined": _combined(parts, weights),
        "gap": abs(one - _combined(parts, weights)) / scale,
        "floor": abs(one - reverse) / scale,
        "source": _source(cap.outputs),
    }


def _source(outs: list[Any]) -> str:
    """A batch-level term the model's own output names (Hugging Face's field names), or ""."""
    for out in outs:
        if getattr(out, "aux_loss", None) is not None or getattr(out, "router_logits", None) is not None:
            return (
                "the router's load-balancing loss of a mixture of experts (the output's aux_loss, computed over "
                "every token of the batch)"
            )
        if getattr(out, "logits_per_image", None) is not None or getattr(out, "logits_per_text", None) is not None:
            return (
                "in-batch negatives of a contrastive loss (logits_per_image scores each row against every other "
                "row of the batch, so a microbatch has fewer negatives)"
            )
    return ""


def _pick(ctx: Context, n: int) -> list[list[Example]]:
    """n microbatches of different lengths: the case a mean per microbatch gets wrong."""
    tr = ctx.trainer
    train = tr.splits["train"]
    pool = [train[i] for i in range(min(len(train), 512))]
    length = tr.task.length
    if length is not None:
        pool.sort(key=lambda e: length(e))
    k = n * tr.microbatch
    step = max(1, len(pool) // k)
    chosen = pool[::step][:k]
    if len(chosen) < k:
        return []
    return [chosen[i * tr.microbatch : (i + 1) * tr.microbatch] for i in range(n)]


def run(ctx: Context, g: Gate) -> None:
    tr = ctx.trainer
    if tr.accumulation <= 1:
        g.skipped = True
        g.check(
            "not applicable",
            True,
            "not applicable: accumulation = 1, one microbatch per update, nothing is accumulated",
        )
        return
    tol = tolerance(ctx)
    n = tr.accumulation
    mbs = _pick(ctx, n)
    if not mbs:
        g.skipped = True
        g.check("examples", True, f"fewer than {n * tr.microbatch} training examples to compare with", warn=True)
        return
    g.inputs.update({"microbatches": n, "microbatch": tr.microbatch, "tolerance": tol})
    length = tr.task.length
    if length is not None:
        g.inputs["lengths"] = [[length(e) for e in mb] for mb in mbs]
    drops = [m for m in tr.model.modules() if isinstance(m, DROPOUT) and m.training and getattr(m, "p", 0) > 0]
    norms = [m for m in tr.model.modules() if isinstance(m, BATCHNORM) and m.training]
    others = [m for m in tr.model.modules() if not isinstance(m, BATCHNORM)]
    was = tr.model.training
    saved_scaler, saved_rng = tr.scaler, rng_state()
    buffers = {k: v.detach().clone() for k, v in tr.model.named_buffers()}  # BatchNorm's running statistics
    found: Found = {}
    try:
        tr.model.train()
        for m in others:
            m.training = False  # this module only: BatchNorm children keep their batch statistics
        tr.scaler = None
        first: list[Accumulated] = []
        acc = _grads(tr, lambda: first.append(tr.accumulate(mbs, check_finite=False)))
        found["count_form"] = first[0]["count"] is not None
        single = _grads(tr, lambda: _single(tr, mbs))
        again = _grads(tr, lambda: _single(tr, mbs))  # the random stream moved on: any randomness left shows
        rel = _relative(acc, single)
        found["noise"] = _relative(again, single)
        if found["noise"] > tol:  # is the randomness the seed's (masking, augmentation) or a generator of its own?
            start = rng_state()
            one = _grads(tr, lambda: _single(tr, mbs))
            set_rng_state(start)
            found["seeded"] = _relative(_grads(tr, lambda: _single(tr, mbs)), one) <= tol
            if not found["seeded"]:  # not the seed's: state the model carries from call to call?
                found["carried"] = carried.changed_by(tr.model, lambda: _grads(tr, lambda: _single(tr, mbs)))
        if rel > tol and norms:
            for m in norms:
                m.training = False
            acc_frozen = _grads(tr, lambda: tr.accumulate(mbs, check_finite=False))
            found["frozen"] = _relative(acc_frozen, _grads(tr, lambda: _single(tr, mbs)))
            for m in norms:
                m.training = True
        counts = _counts(ctx, mbs)
        found["counts"] = counts
        if rel > tol and counts and sum(counts) > 0 and found.get("frozen", rel) > tol and not found["count_form"]:
            weights = [c / sum(counts) for c in counts]
            weighted = _grads(tr, lambda: tr.accumulate(mbs, check_finite=False, weights=weights))
            found["weighted"] = _relative(weighted, single)
        if rel > tol and found["noise"] <= tol:
            found["decomposition"] = decomposition(tr, mbs, counts)
    finally:
        tr.scaler = saved_scaler
        tr.optimizer.zero_grad(set_to_none=True)
        tr.model.train(was)
        with torch.no_grad():
            for k, v in tr.model.named_buffers():
                if k in buffers:
                    v.copy_(buffers[k])
        set_rng_state(saved_rng)  # the piloted run's random stream and statistics are left as they were
    g.extra["relative_difference"] = rel
    _verdict(ctx, g, rel, tol, found, drops, norms)


def _declared(ctx: Context) -> str:
    task = ctx.the_task
    said = [f"Task.{k}" for k in ("batch_level_loss", "batch_statistics") if getattr(task, k, False)]
    return " and ".join(said)


def _verdict(ctx: Context, g: Gate, rel: float, tol: float, found: Found, drops: list[Any], norms: list[Any]) -> None:
    tr = ctx.trainer
    how = (
        "(sum, count) normalised over the update"
        if found.get("count_form")
        else f"mean per microbatch / {tr.accumulation}"
    )
    off = f"; dropout off for the comparison ({len(drops)} dropout modules)" if drops else ""
    pct = f"{rel:.2e} ({rel:.1%})" if rel >= 1e-3 else f"{rel:.2e}"
    name = "accumulated == single batch"
    declared = _declared(ctx)
    if rel <= tol:
        note = (
            f"; {declared} declares a batch-level term, but none shows at microbatch {tr.microbatch} (the two agree)"
            if declared
            else ""
        )
        g.check(name, True, f"relative difference {pct} (tolerance {tol:.0e}); loss {how}{off}{note}")
        return
    noise = found.get("noise", 0.0)
    if noise > tol and found.get("seeded"):
        g.not_applicable(
            name,
            f"the same batch twice differs by {noise:.1%} with dropout off, through random numbers "
            "the seed reproduces (noise or timesteps drawn in the loss, random masking or augmentation in the "
            "collate or the forward), and an "
            "accumulated update draws them in another order than one big batch, so the two cannot be compared "
            "exactly; pilot a variant without that randomness (e.g. masking probability 0) to compare",
        )
        return
    state = found.get("carried") or []
    if noise > tol and state:
        g.check(
            name,
            False,
            f"differ by {pct}, but the same batch twice differs by {noise:.2e} ({noise:.1%}) with dropout off: "
            f"the model carries state from one call to the next ({', '.join(state[:4])} change at every forward: "
            "a hidden state, a cache, a counter), so an accumulated update cannot be compared with one batch; "
            "expected for a recurrent model trained with carried state; reset it at each update to compare",
            warn=True,
        )
        return
    if noise > tol:
        g.check(
            name,
            False,
            f"differ by {pct}, but the same batch twice differs by {noise:.2e} ({noise:.1%}) with dropout "
            "off, and replaying the RNG state does not reproduce it: randomness the seed does not control (a "
            "generator of its own, a counter or cache that changes between calls), so the two cannot be compared; "
            "draw random numbers from torch's (seeded) generator to get this check",
            warn=True,
        )
        return
    frozen = found.get("frozen")
    if norms and frozen is not None and frozen <= tol:
        g.check(
            name,
            bool(declared),
            f"differ by {pct}: {len(norms)} BatchNorm layers normalise each microbatch by its own statistics "
            f"(with them frozen the two agree to {frozen:.1e}); "
            + (f"expected, as {declared} declares: " if declared else "legitimate, but ")
            + f"an accumulated update is not the big batch's: a microbatch of {tr.microbatch} sets the statistics",
            warn=True,
        )
        return
    weighted = found.get("weighted")
    counts = found.get("counts") or []
    if weighted is not None and weighted <= max(tol, rel / 100):
        g.check(
            name,
            False,
            f"differ by {pct}: the loss is a mean per microbatch over uneven counts ({', '.join(map(str, counts))} "
            f"supervised items in the {len(counts)} microbatches), so each microbatch weighs 1/{len(counts)} "
            f"whatever its size; weighted by its count the accumulated gradient agrees to {weighted:.1e}. "
            "Return (sum, count) from the loss, or weigh each microbatch's mean by its count",
        )
        return
    dec = found.get("decomposition")
    if dec is not None:
        g.extra["decomposition"] = {
            **dec,
            "whole": round(dec["whole"], 8),
            "combined": round(dec["combined"], 8),
            "gap": round(dec["gap"], 8),
            "floor": round(dec["floor"], 8),
        }
    floor = max(8 * dec["floor"], 1e-6 if tol <= 1e-4 else tol / 10) if dec else 0.0
    if dec is not None and (dec["gap"] > floor or dec["source"]):
        batch_level(ctx, g, name, pct, dec, declared)
        return
    measured = (
        f"; the whole batch's loss equals its microbatches' combined to {dec['gap']:.1e}, so not a batch-level term"
        if dec
        else ""
    )
    cause = measured_cause(ctx)
    if cause:  # the cause is measured at the data gate: that check is the finding, this its consequence
        g.check(name, False, f"differ by {pct} (tolerance {tol:.0e}); loss {how}: {cause[0]}", warn=True)
        g.remedy = cause[1]
        return
    g.check(
        name,
        False,
        f"differ by {pct} (tolerance {tol:.0e}); loss {how}; not randomness (two identical passes agree to "
        f"{noise:.1e}), not batch statistics{'' if norms else ' (no BatchNorm)'}, not uneven counts{measured}: "
        "look for state carried between microbatches (a cache, a counter) or a backward that depends on the "
        "batch (a gradient hook, a custom autograd function scaling by the batch size)",
    )


def measured_cause(ctx: Context) -> tuple[str, str] | None:
    """What the data gate measured that makes a microbatch's outputs differ from the whole batch's: examples the
    model mixes, or padding that reaches the predictions (a microbatch pads to its own longest example); the words
    and the remedy, or None."""
    mixed = ctx.findings.get("examples mixed")
    if mixed:
        return (
            f"the model mixes the examples of a batch (the data gate's check 'examples independent': {mixed}), so "
            "a microbatch sees other neighbours than the whole batch",
            "make each example's output depend on its own inputs only (see the data gate's 'examples independent')",
        )
    padded = ctx.findings.get("padding seen")
    if padded:
        return (
            f"padding reaches the predictions (the data gate's check 'padding invisible to the text': {padded}), "
            "and a microbatch pads to its own longest example, not the whole batch's",
            "keep padding out of every output (see the data gate's 'padding invisible to the text')",
        )
    return None


def batch_level(ctx: Context, g: Gate, name: str, pct: str, dec: ev.Decomposition, declared: str) -> None:
    """The loss does not decompose over examples: expected for the objectives that say or show so, else a warning."""
    tr = ctx.trainer
    n, m = tr.accumulation, tr.microbatch
    gap = dec["gap"]
    size = f"{gap:.2e}" if gap < 1e-3 else f"{gap:.1%}"
    words = (
        f"the loss has a batch-level term: accumulating {n} microbatches of {m} optimises a different objective "
        f"than one batch of {n * m} (difference {size} in the loss: {dec['whole']:.6g} for the batch, "
        f"{dec['combined']:.6g} from its microbatches, under the same RNG state; {pct} in the gradient)"
    )
    source = dec.get("source") or ""
    if declared or source:
        term = (f"{source}; " if source else "") + (f"declared by {declared}" if declared else "")
        g.check(name, True, f"expected for this objective: {words}; the term: {term.rstrip('; ')}")
        return
    cause = measured_cause(ctx)
    if cause:  # measured where it happens: the data gate's check is the finding, this is its consequence
        g.check(name, False, f"{words}; the cause is measured: {cause[0]}", warn=True)
        g.remedy = cause[1]
        return
    g.check(
        name,
        False,
        f"{words}; nothing in the model's output names it (a contrastive loss over in-batch negatives, a "
        "balancing loss, statistics of the batch?): if it is meant, declare Task.batch_level_loss = True",
        warn=True,
    )
    g.remedy = (
        "expected for an objective over the whole batch: declare Task.batch_level_loss = True; to train the big "
        "batch's objective, raise the microbatch and lower accumulation instead"
    )


def inputs(ctx: Context) -> dict[str, ev.JSON]:
    return {"accumulation": ctx.settings.accumulation}


PHASE = Phase(
    "accumulation",
    run,
    remedy="return (sum, count) from the loss so Cockpit normalises over the whole update, "
    "or divide by the accumulation count",
    checks=("accumulated == single batch", "not applicable", "examples"),
    independent=True,
    inputs=inputs,
    doc="accumulated gradient == single-batch gradient",
)
