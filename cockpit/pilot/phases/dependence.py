"""What each output depends on: the batch invariants, measured by perturbing the user's own batch on the probe.

Run in the data gate on the model ``build_model`` returns (the alignment probe, in eval mode: dropout off and
BatchNorm on its running statistics, so neither can mix examples or add noise), with the user's own loss, each
pass under one replayed random state (a diffusion loss draws the same noise and timesteps every time), without
gradients except where the loss's gradient at the outputs is read. Four invariants of healthy training:

- **every input field read** (``FIELDS``): each tensor field of the batch that differs across examples, and each
  tensor the loss computes and hands the model (a diffusion loss's timesteps), shuffled across the batch alone,
  must change the model's outputs or the loss by more than the same pass repeated does. A field that reaches
  nothing, not even a module inside the model, is ignored: a failure when the model's ``forward`` takes an
  argument of that name (an ``attention_mask`` never passed), a warning otherwise. A field that moves the outputs
  a thousandth as much as the model's strongest input is seen at a scale it cannot resolve (a warning).
- **examples independent** (``INDEPENDENT``): example j of the batch replaced by another example must leave every
  other example's outputs as they were. A model that mixes examples (a reshape across the batch dimension, an
  LSTM fed (batch, time) without ``batch_first``, statistics of the batch in ``forward``) is named with the rows
  that changed and the first module whose output mixed them; in a (B, B) output (pairwise scores of in-batch
  negatives) the scores against example j may move, and a declared ``Task.batch_level_loss`` /
  ``batch_statistics`` or a router's output make a mixing expected.
- **targets hidden from the model** (``HIDDEN``): changing one target must not change the output it is scored
  against (a labels tensor fed as a feature), a real-valued target must not sit in an input column (the target
  column left in the features), and an output must not read the input token it is asked to predict (a causal LM
  whose attention was made bidirectional): the target of each output position is read from the loss's gradient
  there (the token a cross-entropy pulls towards), and the input that holds it is changed.
- **padding invisible to the text** (``PADDING``, ``padding.py``): the tokens at padded positions changed must
  leave the text's outputs as they were (an inverted mask, a mean pooling over padding).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from ...contract import Batch
from ..context import Context
from ..gate import Gate
from ..perturb import (
    Base,
    Pass,
    Swap,
    differs,
    forward_args,
    gate_figures,
    grad_at_outputs,
    mods_changed,
    module_of,
    out_change,
    pct,
    roll,
    run_once,
    tolerance,
)
from ..rng import rng_state, set_rng_state
from .independence import INDEPENDENT, independent
from .padding import PADDING, invisible
from .targets_hidden import HIDDEN, hidden

FIELDS = "every input field read"
CHECKS = (FIELDS, INDEPENDENT, HIDDEN, PADDING)

UNRESOLVED = 1e-3  # a field moving the outputs this share of what the strongest input does: seen, barely
STRETCH = 100.0  # a scalar field's values multiplied by this ...
STRETCHED = 8.0  # ... moving the outputs this many times more when shuffled: given below the model's range
DRAWS = 4  # random states the stretch is measured under (a loss that draws its timesteps draws new ones)


def measure(ctx: Context, g: Gate, batch: Batch, model: torch.nn.Module | None, why: str = "") -> None:
    """The three batch-invariant checks on the probe ``model`` (None: each check is not applicable, ``why``)."""
    task = ctx.the_task
    lab = batch.get(task.label_key)
    n = next((int(v.shape[0]) for k, v in batch.items() if torch.is_tensor(v) and v.dim() >= 1), 0)
    if model is None:
        for name in CHECKS:
            g.not_applicable(name, why or "no model to measure with")
        return
    if n < 2:
        for name in CHECKS:
            g.not_applicable(name, f"{n} example in the first batch: nothing to shuffle or compare across")
        return
    on = {k: (v.to(ctx.device) if torch.is_tensor(v) else v) for k, v in batch.items()}
    saved = rng_state()
    try:
        start = rng_state()
        first = run_once(ctx, model, on, start, n)
        again = run_once(ctx, model, on, start, n)
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,))) + 1)
        other = run_once(ctx, model, on, rng_state(), n)
        scale = max(abs(first.loss), 1e-12)
        base = Base(
            start,
            first,
            out_change(first, again),
            abs(first.loss - again.loss) / scale,
            abs(first.loss - other.loss) / scale,
            n,
        )
        figures: dict[str, Any] = {"noise": base.noise_out, "draws": base.draw_loss}
        g.extra["dependence"] = figures
        if not first.outs:
            for name in CHECKS:
                g.not_applicable(name, "the model's forward returned no floating tensor Cockpit can compare")
            return
        fields_read(ctx, g, on, model, base, lab)
        independent(ctx, g, on, model, base)
        hidden(ctx, g, on, model, base)
        invisible(ctx, g, on, model, base)
    except Exception as exc:  # an extra measurement: whatever stops it, the checks say why instead of guessing
        done = {c["name"] for c in g.checks}
        for name in CHECKS:
            if name not in done:
                g.not_applicable(
                    name, f"the loss could not be run on a perturbed batch ({type(exc).__name__}: {str(exc)[:160]})"
                )
    finally:
        set_rng_state(saved)


# --------------------------------------------------------------------------- class 4: every input field read


@dataclass
class Read:
    what: str  # "field x" or "argument t of the model"
    out: float  # relative change of the outputs
    loss: float  # relative change of the loss
    modules: list[str]
    named: bool  # the model's forward takes an argument of that name
    arrives: bool = False  # the tensor itself is among the model's arguments
    key: str = ""  # the batch field shuffled ("" for an argument the loss computes)
    stretched: float = 0.0  # a scalar per example: how much more shuffling it moves the outputs at 100x its values
    graded: bool = False  # continuous values (not ids, not a 0/1 mask): a scale the model may be unable to resolve


def fields_read(ctx: Context, g: Gate, batch: Batch, model: torch.nn.Module, base: Base, lab: Any) -> None:
    task, n = ctx.the_task, base.n
    tol = tolerance(ctx, max(base.noise_out, base.noise_loss))
    takes = forward_args(model)
    found: list[Read] = []
    for k, v in batch.items():
        if k == task.label_key or not torch.is_tensor(v) or v.dim() < 1 or v.shape[0] != n or not differs(v):
            continue
        if (
            k == task.loss_mask_key
        ):  # which positions count: the data gate's instruction checks read it against the labels
            continue
        p = run_once(ctx, model, {**batch, k: roll(v)}, base.start, n)
        r = _read(f"field {k!r}", base, p, tol, k in takes)
        r.key, r.graded = k, _graded(v)
        r.arrives = any(a is v for args, kwargs in base.first.calls for a in (*args, *kwargs.values()))
        if v.is_floating_point() and v.reshape(n, -1).shape[1] == 1 and r.out > tol:
            r.stretched = _stretched(ctx, model, batch, base, k, r.out)
        found.append(r)
    # tensors the loss computes and hands the model (a diffusion loss's noisy images and timesteps)
    ours = {id(v) for v in batch.values() if torch.is_tensor(v)}
    if base.first.calls:
        args, kwargs = base.first.calls[0]
        slots: list[tuple[int | str, torch.Tensor]] = [(i, a) for i, a in enumerate(args) if torch.is_tensor(a)]
        slots += [(kw, a) for kw, a in kwargs.items() if torch.is_tensor(a)]
        params = list(inspect.signature(model.forward).parameters) if takes else []
        for slot, a in slots:
            if id(a) in ours or a.dim() < 1 or a.shape[0] != n or not differs(a):
                continue
            p = run_once(ctx, model, batch, base.start, n, swap=_swap_slot(slot))
            label = slot if isinstance(slot, str) else (params[slot] if slot < len(params) else f"#{slot}")
            r = _read(f"argument {label!r} of the model (computed in the loss)", base, p, tol, True)
            r.graded = _graded(a)
            if a.is_floating_point() and a.reshape(n, -1).shape[1] == 1 and r.out > tol:
                r.stretched = _stretched(ctx, model, batch, base, slot, r.out)
            found.append(r)
    if not found:
        g.not_applicable(FIELDS, "no tensor field of the batch differs across its examples (besides the targets)")
        return
    gate_figures(g)["fields"] = {r.what: round(r.out, 8) for r in found}
    strongest = max(r.out for r in found)
    ignored = [r for r in found if r.out <= tol and r.loss <= tol and not r.modules]
    # a loss at a stationary value (DPO at init, its reference equal to the policy, is ln 2 whatever the batch) still
    # reads a field through its gradient at the outputs
    ignored = [r for r in ignored if not (r.key and _moves_gradient(ctx, model, batch, base, r.key, tol))]
    # a tensor the model receives and does not use (a causal LM's padding mask over right padding, which only
    # padded positions could feel) is the model's design: said, not held against it
    unused = [r for r in ignored if r.arrives]
    ignored = [r for r in ignored if r not in unused]
    inside = [r for r in found if r.out <= tol and r.loss <= tol and r.modules]
    # only continuous values can sit below the scale a model resolves: token ids or a padding mask that moves the
    # outputs a little moves only the few positions it differs at (the blind NER's mask: 9e-4 of its ids' share)
    faint = [r for r in found if (r.graded and tol < r.out < UNRESOLVED * strongest) or r.stretched >= STRETCHED]
    figures = ", ".join(f"{r.what.split(' (')[0]} {pct(r.out)}" for r in found)
    noise = f"the same pass repeated: {base.noise_out:.1e}" + (
        f"; another random draw moves the loss by {pct(base.draw_loss)}" if base.draw_loss > tol else ""
    )
    if ignored:
        lost = [r for r in ignored if r.named and not r.arrives]  # the model takes it; the loss never passes it
        r = (lost or ignored)[0]
        name = r.what.split(" (")[0]
        if lost:
            why = (
                "the model's forward takes an argument of that name, but it never arrives, so the model trains "
                "without it (padding attended as if it were text, a condition left out). Pass it to the model in "
                "the loss"
            )
        else:
            why = "nothing reads it. If it is meant as an input, pass it to the model; else leave it out of the batch"
        g.check(
            FIELDS,
            False,
            f"shuffling {name} across the batch changed neither the model's outputs nor the loss (by "
            f"{max(r.out, r.loss):.1e}; {noise}) and reached no module of the model: {why} (outputs' change per "
            f"field: {figures})",
            warn=not lost,
        )
        return
    if faint:
        r = faint[0]
        stretch = (
            f", and {r.stretched:.1f}x as much with its values multiplied by {STRETCH:g}"
            if r.stretched >= STRETCHED
            else ""
        )
        g.check(
            FIELDS,
            False,
            f"shuffling {r.what} across the batch moved the outputs by only {pct(r.out)}, "
            f"{r.out / strongest:.1e} of what the strongest input does{stretch} ({figures}; {noise}): the model "
            "sees it at a scale it cannot resolve (timesteps divided by their count into a model that embeds "
            "integer steps, a condition multiplied away). Give it the values the model was built for",
            warn=True,
        )
        return
    note = (
        f"; {', '.join(r.what.split(' (')[0] for r in inside)} reach the modules "
        f"{', '.join(module_of(m) for m in inside[0].modules[:2])} but not yet the outputs (a zero-initialised gate)"
        if inside
        else ""
    )
    if unused:
        note += (
            f"; the model receives {', '.join(r.what.split(' (')[0] for r in unused)} and its outputs do not depend "
            "on it here (a causal model's padding mask over right padding; a mask nothing applies would show the "
            "same)"
        )
    g.check(FIELDS, True, f"shuffled across the batch, each field moves the outputs or the loss: {figures}{note}")


def _stretched(ctx: Context, model: torch.nn.Module, batch: Batch, base: Base, slot: int | str, out: float) -> float:
    """A scalar per example (a timestep, a noise level): shuffled at ``STRETCH`` times its values, how many times
    more it moves the outputs (each against the same stretched pass unshuffled), summed over ``DRAWS`` random
    states (the loss draws new values each time). A model built for that field's values resolves them about as
    well at either scale; one given them far below its working range resolves them much better stretched."""
    n = base.n

    def at(scale: float, shuffle: bool) -> Swap:
        def swap(args: tuple[Any, ...], kwargs: dict[str, Any], call: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
            def f(t: torch.Tensor) -> torch.Tensor:
                t = t * scale
                return roll(t) if shuffle else t

            if isinstance(slot, int) and slot < len(args) and torch.is_tensor(args[slot]):
                args = (*args[:slot], f(args[slot]), *args[slot + 1 :])
            elif isinstance(slot, str) and torch.is_tensor(kwargs.get(slot)):
                kwargs = {**kwargs, slot: f(kwargs[slot])}
            return args, kwargs

        return swap

    near, far = 0.0, 0.0
    for draw in range(DRAWS):
        set_rng_state(base.start)
        if draw:
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,))) + draw)
        start = rng_state()
        if isinstance(slot, str) and slot in batch:  # a batch field: stretch it in the batch
            v = batch[slot]
            one = [run_once(ctx, model, {**batch, slot: w}, start, n) for w in (v, roll(v))]
            big = [run_once(ctx, model, {**batch, slot: w}, start, n) for w in (v * STRETCH, roll(v * STRETCH))]
        else:
            one = [run_once(ctx, model, batch, start, n, swap=at(1.0, sh)) for sh in (False, True)]
            big = [run_once(ctx, model, batch, start, n, swap=at(STRETCH, sh)) for sh in (False, True)]
        near += out_change(one[0], one[1])
        far += out_change(big[0], big[1])
    return far / max(near, 1e-12)


def _moves_gradient(ctx: Context, model: torch.nn.Module, batch: Batch, base: Base, key: str, tol: float) -> bool:
    """Shuffling ``key`` changes the loss's gradient at the model's outputs (read by the loss, not by the model)."""
    a = grad_at_outputs(ctx, model, batch, base.start)
    b = grad_at_outputs(ctx, model, {**batch, key: roll(batch[key])}, base.start)
    if not a or len(a) != len(b):
        return False
    scale = max(max(float(x.abs().max()) for x in a), 1e-30)
    return any(float((x - y).abs().max()) / scale > tol for x, y in zip(a, b, strict=True) if x.shape == y.shape)


def _graded(t: torch.Tensor) -> bool:
    """Continuous values: floating point and not only zeros and ones (a float mask is a mask)."""
    return t.is_floating_point() and bool(((t != 0) & (t != 1)).any())


def _read(what: str, base: Base, p: Pass, tol: float, named: bool) -> Read:
    scale = max(abs(base.first.loss), 1e-12)
    return Read(
        what, out_change(base.first, p), abs(p.loss - base.first.loss) / scale, mods_changed(base.first, p, tol), named
    )


def _swap_slot(slot: int | str) -> Swap:
    def swap(args: tuple[Any, ...], kwargs: dict[str, Any], call: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if isinstance(slot, int) and slot < len(args):
            args = (*args[:slot], roll(args[slot]), *args[slot + 1 :])
        elif isinstance(slot, str) and slot in kwargs:
            kwargs = {**kwargs, slot: roll(kwargs[slot])}
        return args, kwargs

    return swap
