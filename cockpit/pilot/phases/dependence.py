"""What each output depends on: the batch invariants, measured by perturbing the user's own batch on the probe.

Run in the data gate on the model ``build_model`` returns (the alignment probe, in eval mode: dropout off and
BatchNorm on its running statistics, so neither can mix examples or add noise), with the user's own loss, each
pass under one replayed random state (a diffusion loss draws the same noise and timesteps every time), without
gradients except where the loss's gradient at the outputs is read. Three invariants of healthy training:

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
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ...contract import Batch
from .. import outputs
from ..context import Context
from ..datascan import ids_text
from ..gate import Gate
from ..rng import RngState, rng_state, set_rng_state

FIELDS = "every input field read"
INDEPENDENT = "examples independent"
HIDDEN = "targets hidden from the model"
CHECKS = (FIELDS, INDEPENDENT, HIDDEN)
ALIGNED = "targets aligned as declared"  # the data gate's own copy check (alignment.py), which this builds on

UNRESOLVED = 1e-3  # a field moving the outputs this share of what the strongest input does: seen, barely
STRETCH = 100.0  # a scalar field's values multiplied by this ...
STRETCHED = 8.0  # ... moving the outputs this many times more when shuffled: given below the model's range
DRAWS = 4  # random states the stretch is measured under (a loss that draws its timesteps draws new ones)


# --------------------------------------------------------------------------- one pass, recorded


@dataclass
class Pass:
    """What one call of the user's loss gave: the loss, the model's output tensors, per-row module fingerprints."""

    loss: float
    outs: list[torch.Tensor]  # every floating tensor of every call of the model's forward, in order
    mods: dict[str, torch.Tensor] = field(default_factory=dict)  # "name#call" -> (B, 2) float64 per-row sums
    order: list[str] = field(default_factory=list)  # the modules' keys in execution order
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)  # the model's arguments
    raw: list[Any] = field(default_factory=list)  # the model's outputs as returned


def tensors_of(out: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """Every floating tensor in a model's output: a tensor, a mapping's values, a tuple's items (3 levels)."""
    if torch.is_tensor(out):
        if out.is_floating_point() and out.dim() >= 1:
            yield out.detach()
        return
    if depth >= 3:
        return
    if isinstance(out, Mapping):
        for v in out.values():
            yield from tensors_of(v, depth + 1)
    elif isinstance(out, (tuple, list)):
        for v in out:
            yield from tensors_of(v, depth + 1)


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    x = t.detach().double().reshape(n, -1)
    return torch.stack([x.abs().sum(1), x.sum(1)], 1)


Swap = Callable[[tuple[Any, ...], dict[str, Any], int], tuple[tuple[Any, ...], dict[str, Any]]]


@contextmanager
def _recording(model: torch.nn.Module, n: int, p: Pass, swap: Swap | None) -> Iterator[None]:
    names = {id(m): name or "(model)" for name, m in model.named_modules()}
    seen: dict[str, int] = {}
    calls = [0]

    def pre(module: Any, args: Any, kwargs: Any) -> Any:
        k = calls[0]
        calls[0] += 1
        p.calls.append((tuple(args), dict(kwargs)))
        if swap is not None:
            return swap(tuple(args), dict(kwargs), k)
        return None

    def post(module: Any, args: Any, out: Any) -> None:
        name = names.get(id(module))
        if name is None:
            return
        first = next((t for t in tensors_of(out) if t.shape[0] == n), None)
        if first is None:
            return
        c = seen.get(name, 0)
        seen[name] = c + 1
        key = f"{name}#{c}"
        p.mods[key] = _rows(first, n)
        p.order.append(key)

    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = torch.nn.modules.module.register_module_forward_hook(post)
    try:
        yield
    finally:
        h1.remove()
        h2.remove()


def run_once(
    ctx: Context, model: torch.nn.Module, batch: Batch, start: RngState, n: int, swap: Swap | None = None
) -> Pass:
    """The user's loss on ``batch`` under the random state ``start``, without gradients, recorded."""
    p = Pass(0.0, [])
    set_rng_state(start)
    with torch.no_grad(), outputs.capture(model) as cap, _recording(model, n, p, swap):
        lo = ctx.trainer.loss_call(batch, net=model)
    value = float(lo.value.detach().double())
    p.loss = value / float(lo.count) if lo.count is not None and float(lo.count) else value
    p.outs = [t for o in cap.outputs for t in tensors_of(o)]
    p.raw = list(cap.outputs)
    return p


def _scale(t: torch.Tensor) -> float:
    return max(float(t.detach().abs().max()) if t.numel() else 0.0, 1e-12)


def out_change(a: Pass, b: Pass, rows: list[int] | None = None, n: int = 0, drop: int | None = None) -> float:
    """The largest change of any output between two passes, relative to that output's largest value
    (over ``rows`` only, for the outputs laid out one row per example; a (B, B) output without column ``drop``,
    the scores against the example that was changed)."""
    worst = 0.0
    for x, y in zip(a.outs, b.outs, strict=False):
        if x.shape != y.shape or x.numel() == 0:
            continue
        if rows is not None:
            if x.shape[0] != n:
                continue
            x, y = _others(x, rows, n, drop), _others(y, rows, n, drop)
            if x.numel() == 0:
                continue
        d = float((x.double() - y.double()).abs().max()) / _scale(x)
        worst = max(worst, d)
    return worst


def mods_changed(a: Pass, b: Pass, tol: float, rows: list[int] | None = None) -> list[str]:
    """The modules (in execution order) whose output changed between two passes, by more than ``tol``."""
    out = []
    for key in a.order:
        x, y = a.mods.get(key), b.mods.get(key)
        if x is None or y is None or x.shape != y.shape:
            continue
        if rows is not None:
            x, y = x[rows], y[rows]
        scale = max(float(x.abs().max()), 1e-12)
        if float((x - y).abs().max()) / scale > tol:
            out.append(key)
    return out


def _others(t: torch.Tensor, rows: list[int], n: int, drop: int | None) -> torch.Tensor:
    """``rows`` of an output; of a (B, B) one (pairwise scores, or logits over as many classes as examples),
    without the column ``drop``: only the scores against the changed example may move."""
    t = t[rows]
    if drop is not None and pairwise_shape(t, n):
        keep = [c for c in range(n) if c != drop]
        t = t[:, keep]
    return t


def pairwise_shape(t: torch.Tensor, n: int) -> bool:
    return t.dim() == 2 and t.shape[1] == n


def _differs(v: torch.Tensor) -> bool:
    return v.shape[0] >= 2 and not bool((v == v[:1]).all())


def _roll(v: torch.Tensor) -> torch.Tensor:
    return torch.roll(v, 1, 0)


def _tolerance(ctx: Context, noise: float) -> float:
    base = 1e-5 if ctx.trainer.precision == "fp32" else 2e-2
    return max(base, 8 * noise)


def _who(batch: Batch, rows: list[int]) -> str:
    ids = batch.get("ids") or []
    return ids_text([str(ids[r]) if r < len(ids) else f"row {r}" for r in rows], 3)


def _module(key: str) -> str:
    return key.split("#")[0]


def _forward_args(model: torch.nn.Module) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


# --------------------------------------------------------------------------- the measurement


@dataclass
class Base:
    """The unperturbed pass, its repeat under the same random state, and the loss under another state."""

    start: RngState
    first: Pass
    noise_out: float
    noise_loss: float
    draw_loss: float  # the loss's change under a different random state (a stochastic objective)
    n: int


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


def fields_read(ctx: Context, g: Gate, batch: Batch, model: torch.nn.Module, base: Base, lab: Any) -> None:
    task, n = ctx.the_task, base.n
    tol = _tolerance(ctx, max(base.noise_out, base.noise_loss))
    takes = _forward_args(model)
    found: list[Read] = []
    for k, v in batch.items():
        if k == task.label_key or not torch.is_tensor(v) or v.dim() < 1 or v.shape[0] != n or not _differs(v):
            continue
        if (
            k == task.loss_mask_key
        ):  # which positions count: the data gate's instruction checks read it against the labels
            continue
        p = run_once(ctx, model, {**batch, k: _roll(v)}, base.start, n)
        r = _read(f"field {k!r}", base, p, tol, k in takes)
        r.key = k
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
            if id(a) in ours or a.dim() < 1 or a.shape[0] != n or not _differs(a):
                continue
            p = run_once(ctx, model, batch, base.start, n, swap=_swap_slot(slot))
            label = slot if isinstance(slot, str) else (params[slot] if slot < len(params) else f"#{slot}")
            r = _read(f"argument {label!r} of the model (computed in the loss)", base, p, tol, True)
            if a.is_floating_point() and a.reshape(n, -1).shape[1] == 1 and r.out > tol:
                r.stretched = _stretched(ctx, model, batch, base, slot, r.out)
            found.append(r)
    if not found:
        g.not_applicable(FIELDS, "no tensor field of the batch differs across its examples (besides the targets)")
        return
    _figures(g)["fields"] = {r.what: round(r.out, 8) for r in found}
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
    faint = [r for r in found if tol < r.out < UNRESOLVED * strongest or r.stretched >= STRETCHED]
    figures = ", ".join(f"{r.what.split(' (')[0]} {_pct(r.out)}" for r in found)
    noise = f"the same pass repeated: {base.noise_out:.1e}" + (
        f"; another random draw moves the loss by {_pct(base.draw_loss)}" if base.draw_loss > tol else ""
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
            f"shuffling {r.what} across the batch moved the outputs by only {_pct(r.out)}, "
            f"{r.out / strongest:.1e} of what the strongest input does{stretch} ({figures}; {noise}): the model "
            "sees it at a scale it cannot resolve (timesteps divided by their count into a model that embeds "
            "integer steps, a condition multiplied away). Give it the values the model was built for",
            warn=True,
        )
        return
    note = (
        f"; {', '.join(r.what.split(' (')[0] for r in inside)} reach the modules "
        f"{', '.join(_module(m) for m in inside[0].modules[:2])} but not yet the outputs (a zero-initialised gate)"
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
                return _roll(t) if shuffle else t

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
            one = [run_once(ctx, model, {**batch, slot: w}, start, n) for w in (v, _roll(v))]
            big = [run_once(ctx, model, {**batch, slot: w}, start, n) for w in (v * STRETCH, _roll(v * STRETCH))]
        else:
            one = [run_once(ctx, model, batch, start, n, swap=at(1.0, sh)) for sh in (False, True)]
            big = [run_once(ctx, model, batch, start, n, swap=at(STRETCH, sh)) for sh in (False, True)]
        near += out_change(one[0], one[1])
        far += out_change(big[0], big[1])
    return far / max(near, 1e-12)


def _grad_at_outputs(ctx: Context, model: torch.nn.Module, batch: Batch, start: RngState) -> list[torch.Tensor]:
    set_rng_state(start)
    with torch.enable_grad(), outputs.capture(model) as cap:
        lo = ctx.trainer.loss_call(batch, net=model)
    outs = [t for o in cap.outputs for t in _graph_tensors(o)]
    if not outs or not lo.value.requires_grad:
        return []
    grads = torch.autograd.grad(lo.value.float().sum(), outs, allow_unused=True)
    return [torch.zeros_like(o) if gr is None else gr.detach() for o, gr in zip(outs, grads, strict=True)]


def _graph_tensors(out: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if torch.is_tensor(out):
        if out.is_floating_point() and out.requires_grad:
            yield out
    elif depth < 3 and isinstance(out, Mapping):
        for v in out.values():
            yield from _graph_tensors(v, depth + 1)
    elif depth < 3 and isinstance(out, (tuple, list)):
        for v in out:
            yield from _graph_tensors(v, depth + 1)


def _moves_gradient(ctx: Context, model: torch.nn.Module, batch: Batch, base: Base, key: str, tol: float) -> bool:
    """Shuffling ``key`` changes the loss's gradient at the model's outputs (read by the loss, not by the model)."""
    a = _grad_at_outputs(ctx, model, batch, base.start)
    b = _grad_at_outputs(ctx, model, {**batch, key: _roll(batch[key])}, base.start)
    if not a or len(a) != len(b):
        return False
    scale = max(max(float(x.abs().max()) for x in a), 1e-30)
    return any(float((x - y).abs().max()) / scale > tol for x, y in zip(a, b, strict=True) if x.shape == y.shape)


def _figures(g: Gate) -> dict[str, Any]:
    return g.extra.setdefault("dependence", {})  # type: ignore[return-value]


def _read(what: str, base: Base, p: Pass, tol: float, named: bool) -> Read:
    scale = max(abs(base.first.loss), 1e-12)
    return Read(
        what, out_change(base.first, p), abs(p.loss - base.first.loss) / scale, mods_changed(base.first, p, tol), named
    )


def _swap_slot(slot: int | str) -> Swap:
    def swap(args: tuple[Any, ...], kwargs: dict[str, Any], call: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if isinstance(slot, int) and slot < len(args):
            args = (*args[:slot], _roll(args[slot]), *args[slot + 1 :])
        elif isinstance(slot, str) and slot in kwargs:
            kwargs = {**kwargs, slot: _roll(kwargs[slot])}
        return args, kwargs

    return swap


def _pct(x: float) -> str:
    return f"{x:.1%}" if x >= 1e-3 else f"{x:.1e}"


# --------------------------------------------------------------------------- class 5: examples independent


def _replace_row(batch: Batch, n: int, j: int, k: int) -> Batch:
    out = dict(batch)
    for key, v in batch.items():
        if torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == n:
            w = v.clone()
            w[j] = v[k]
            out[key] = w
    return out


def independent(ctx: Context, g: Gate, batch: Batch, model: torch.nn.Module, base: Base) -> None:
    task, n = ctx.the_task, base.n
    per_example = [t for t in base.first.outs if t.shape[0] == n]
    if not per_example:
        shapes = ", ".join(str(tuple(t.shape)) for t in base.first.outs[:3])
        g.not_applicable(INDEPENDENT, f"no output of the model is laid out one row per example ({shapes})")
        return
    j = n - 1
    rows = list(range(n - 1))
    k = next(
        (
            r
            for r in rows
            if any(
                torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == n and not torch.equal(v[r], v[j])
                for v in batch.values()
            )
        ),
        None,
    )
    if k is None:
        g.not_applicable(INDEPENDENT, "every example of the first batch is the same: nothing to change")
        return
    tol = _tolerance(ctx, base.noise_out)
    p = run_once(ctx, model, _replace_row(batch, n, j, k), base.start, n)
    own = out_change(base.first, p, [j], n)
    leak = out_change(base.first, p, rows, n, drop=j)
    _figures(g)["examples"] = {"own": own, "others": leak}
    who_j = _who(batch, [j])
    if leak <= tol:
        g.check(
            INDEPENDENT,
            True,
            f"replacing example {who_j} changed its own outputs by {_pct(own)} and the other {n - 1} examples' "
            f"by {leak:.1e} (the same pass repeated: {base.noise_out:.1e})",
        )
        return
    changed = [
        r
        for r in rows
        if any(
            float((_others(x, [r], n, j).double() - _others(y, [r], n, j).double()).abs().max()) / _scale(x) > tol
            for x, y in zip(base.first.outs, p.outs, strict=False)
            if x.shape == y.shape and x.shape[0] == n and _others(x, [r], n, j).numel()
        )
    ]
    mixed = mods_changed(base.first, p, tol, rows)
    where = (
        f"; the first module whose output for another example changed is {_module(mixed[0])!r}"
        + (f" ({type(dict(model.named_modules()).get(_module(mixed[0]), model)).__name__})" if mixed else "")
        if mixed
        else ""
    )
    declared = [f"Task.{a}" for a in ("batch_level_loss", "batch_statistics") if getattr(task, a, False)]
    router = any(
        getattr(o, "aux_loss", None) is not None or getattr(o, "router_logits", None) is not None
        for o in base.first.raw
    )
    words = (
        f"replacing only example {who_j} changed the outputs of {len(changed)} other examples of the batch "
        f"({_who(batch, changed)}) by up to {_pct(leak)} of their scale (its own by {_pct(own)}; the same pass "
        f"repeated: {base.noise_out:.1e}){where}"
    )
    ctx.findings["examples mixed"] = words
    if declared or router:
        why = " and ".join(declared) or "the router of a mixture of experts (its output names router_logits)"
        g.check(INDEPENDENT, True, f"expected, as {why} says: {words}")
        return
    g.check(
        INDEPENDENT,
        False,
        f"{words}: the model mixes the examples of a batch, so each one's prediction depends on which others "
        "share its batch (and differs between training, evaluation and deployment). Look there for a reshape or "
        "view across the batch dimension, a recurrent or attention layer fed (batch, time) where it expects "
        "(time, batch) (batch_first), statistics over dim 0 in forward, or sequences concatenated without offsets "
        "or masks; if the model is meant to use the batch, declare Task.batch_statistics = True",
    )


# --------------------------------------------------------------------------- class 6: targets hidden


def hidden(ctx: Context, g: Gate, batch: Batch, model: torch.nn.Module, base: Base) -> None:
    task, n = ctx.the_task, base.n
    lab = batch.get(task.label_key)
    if any(c["name"] == ALIGNED and not c["ok"] and not c.get("warn") for c in g.checks):
        g.not_applicable(HIDDEN, f"the check {ALIGNED!r} above already names the targets the model copies")
        return
    said: list[str] = []
    if torch.is_tensor(lab) and lab.dim() >= 1 and lab.shape[0] == n:
        verdict = _labels_fed(ctx, batch, model, base, lab)
        if verdict is not None:
            ok, words = verdict
            if not ok:
                g.check(HIDDEN, False, words)
                return
            said.append(words)
        copy = _target_column(ctx, batch, model, base, lab)
        if copy is not None:
            g.check(HIDDEN, False, copy)
            return
    seq = _next_token_seen(ctx, batch, model, base)
    if seq is not None:
        ok, words = seq
        if not ok:
            g.check(HIDDEN, False, words)
            return
        said.append(words)
    if not said:
        g.not_applicable(
            HIDDEN,
            "no target to change: the batch has no targets laid out one per example, and no output is scored "
            "against a token of its own input",
        )
        return
    g.check(HIDDEN, True, "; ".join(said))


def _labels_fed(
    ctx: Context, batch: Batch, model: torch.nn.Module, base: Base, lab: torch.Tensor
) -> tuple[bool, str] | None:
    """Change one target; the outputs it is scored against must stay as they were."""
    task, n = ctx.the_task, base.n
    sup = lab != task.ignore_index if not lab.is_floating_point() else torch.ones_like(lab, dtype=torch.bool)
    flat = sup.reshape(n, -1)
    r = int(flat.sum(1).argmax())
    cols = flat[r].nonzero().flatten().tolist()
    if not cols:
        return None
    seq = lab.dim() >= 2 and lab.shape[1] > 1
    t = cols[len(cols) // 2] if seq else 0
    changed = lab.clone()
    view = changed.reshape(n, -1)
    if changed.is_floating_point():
        view[r, t] = view[r, t] + 1.0 + view[r, t].abs()
    else:
        top = int(lab.max()) + 1
        view[r, t] = (view[r, t] + 1) % max(top, 2)
    p = run_once(ctx, model, {**batch, task.label_key: changed}, base.start, n)
    tol = _tolerance(ctx, base.noise_out)
    shift = 1 if task.label_convention == "shift_in_loss" and seq else 0
    upto = t - shift  # the output position the target at t is scored at, and every position before it
    worst = 0.0
    for x, y in zip(base.first.outs, p.outs, strict=False):
        if x.shape != y.shape or x.shape[0] != n:
            continue
        a, b = x[r].double(), y[r].double()
        if seq and a.dim() >= 1 and a.shape[0] == lab.shape[1]:
            if upto < 0:
                continue
            a, b = a[: upto + 1], b[: upto + 1]
        worst = max(worst, float((a - b).abs().max()) / _scale(x))
    who = _who(batch, [r])
    where = f"target {t} of example {who}" if seq else f"the target of example {who}"
    if worst <= tol:
        return True, f"changing {where} left the outputs it is scored against unchanged ({worst:.1e})"
    return False, (
        f"changing only {where} ({task.label_key!r}) changed the model's outputs "
        + (f"at positions up to {upto}, where it is scored, " if seq else "")
        + f"by {_pct(worst)} of their scale (the same pass repeated: {base.noise_out:.1e}): the model receives its "
        f"own targets as an input, so it learns to copy them and has nothing to predict from at inference. Keep "
        f"{task.label_key!r} out of the model's inputs (only the loss may read it)"
    )


def _target_column(ctx: Context, batch: Batch, model: torch.nn.Module, base: Base, lab: torch.Tensor) -> str | None:
    """A real-valued target per example that is also a column of an input field, read by the model."""
    task, n = ctx.the_task, base.n
    if not lab.is_floating_point() or lab.reshape(n, -1).shape[1] != 1 or not _differs(lab):
        return None
    y = lab.reshape(n, 1).double()
    for key, v in batch.items():
        if key == task.label_key or not torch.is_tensor(v) or not v.is_floating_point() or v.dim() < 2:
            continue
        if v.shape[0] != n:
            continue
        flat = v.reshape(n, -1).double()
        same = ((flat - y).abs() <= 1e-6 * (1 + y.abs())).all(0)
        if not bool(same.any()):
            continue
        c = int(same.nonzero()[0])
        bumped = v.clone()
        view = bumped.reshape(n, -1)
        view[:, c] = view[:, c] + 1.0 + view[:, c].abs()
        p = run_once(ctx, model, {**batch, key: bumped}, base.start, n)
        moved = out_change(base.first, p, list(range(n)), n)
        if moved <= _tolerance(ctx, base.noise_out):
            continue
        return (
            f"column {c} of {key!r} equals the target {task.label_key!r} in all {n} examples of the first batch, "
            f"and the model reads it (changing that column moved the outputs by up to {_pct(moved)}): "
            "the target is one of the inputs (the target column left in the features), so the model learns to "
            "copy it and the loss measures nothing it will have at inference. Drop that column from the inputs"
        )
    return None


def _next_token_seen(ctx: Context, batch: Batch, model: torch.nn.Module, base: Base) -> tuple[bool, str] | None:
    """Outputs scored against a token of the model's own input: the target of each output position is the token
    the loss's gradient there pulls hardest towards (a cross-entropy's -1 at the target); the input position
    holding that token must not change the output."""
    n = base.n
    if not base.first.calls:
        return None
    set_rng_state(base.start)
    with torch.enable_grad(), outputs.capture(model) as cap:
        lo = ctx.trainer.loss_call(batch, net=model)
    heads = [
        (i, o)
        for i, out in enumerate(cap.outputs)
        if (o := outputs.logits_of(out)) is not None and o.dim() == 3 and o.shape[0] == n and o.requires_grad
    ]
    if not heads or not lo.value.requires_grad:
        return None
    grads = torch.autograd.grad(lo.value.float().sum(), [o for _, o in heads], allow_unused=True)
    for (call, logits), gr in zip(heads, grads, strict=True):
        if gr is None or call >= len(base.first.calls):
            continue
        args, kwargs = base.first.calls[call]
        target_in = batch.get(ctx.the_task.label_key)
        given = [*args, *(v for k, v in kwargs.items() if k not in ("labels", ctx.the_task.label_key))]
        streams = [  # what the model reads, not the targets it is handed for its own loss (Hugging Face's labels)
            a for a in given if torch.is_tensor(a) and a is not target_in and a.dim() == 2 and a.shape[0] == n
        ]
        streams = [a for a in streams if not a.is_floating_point() and a.shape[1] == logits.shape[1]]
        if not streams:
            continue
        mag = gr.abs()
        weight = mag.amax(-1)  # (B, T)
        scored = weight > 1e-3 * float(weight.max())
        if int(scored.sum()) < 4:
            continue
        target = mag.argmax(-1)  # (B, T)
        for inp in streams:
            found = _relation(inp, target, scored)
            if found is None:
                continue
            d, share, count = found
            rr, pp = _first_pair(inp, target, scored, d)
            q = pp + d
            vocab = max(int(inp.max()) + 1, logits.shape[-1])
            arg = _slot_of(args, kwargs, inp)
            p = run_once(ctx, model, batch, base.start, n, swap=_swap_token(arg, call, rr, q, vocab))
            x, y = base.first.outs, p.outs
            moved = 0.0
            for a, b in zip(x, y, strict=False):
                if a.shape == b.shape and a.dim() == 3 and a.shape[:2] == logits.shape[:2]:
                    moved = max(moved, float((a[rr, pp].double() - b[rr, pp].double()).abs().max()) / _scale(a))
            tol = _tolerance(ctx, base.noise_out)
            rel = f"{share:.0%} of the {count} scored positions are scored against the input token {d} later"
            if d == 0:
                rel = f"{share:.0%} of the {count} scored positions are scored against their own input token"
            if moved <= tol:
                return True, (
                    f"{rel}, which the output there does not read (changing input {q} of example "
                    f"{_who(batch, [rr])} moved output {pp} by {moved:.1e})"
                )
            return False, (
                f"{rel}, and the output reads it: changing input {q} of example {_who(batch, [rr])} (the token "
                f"output {pp} is scored against) moved output {pp} by {_pct(moved)} of its scale (the same pass "
                f"repeated: {base.noise_out:.1e}). So {share:.0%} of the loss sits on tokens the model is given: it "
                "learns to copy, not to predict. "
                + (
                    "The attention lets a position see later tokens: a causal mask missing or replaced (a 4D "
                    "padding mask built BERT-style replaces a decoder's causal mask; is_causal=False); combine "
                    "the padding mask with the causal one"
                    if d > 0
                    else "Shift the targets by one (or the inputs), or mask the positions whose input is the target"
                )
            )
    return None


def _relation(inp: torch.Tensor, target: torch.Tensor, scored: torch.Tensor) -> tuple[int, float, int] | None:
    """The input offset d at which the scored targets are input tokens (target at p == input at p + d)."""
    best: tuple[int, float, int] | None = None
    width = inp.shape[1]
    for d in (0, 1, 2):
        if d >= width:
            break
        s = scored[:, : width - d]
        count = int(s.sum())
        if count < 4:
            continue
        share = int(((target[:, : width - d] == inp[:, d:]) & s).sum()) / count
        if share >= 0.9 and (best is None or share > best[1]):
            best = (d, share, count)
    return best


def _first_pair(inp: torch.Tensor, target: torch.Tensor, scored: torch.Tensor, d: int) -> tuple[int, int]:
    width = inp.shape[1]
    hit = (target[:, : width - d] == inp[:, d:]) & scored[:, : width - d]
    rows, cols = hit.nonzero(as_tuple=True)
    mid = len(rows) // 2
    return int(rows[mid]), int(cols[mid])


def _slot_of(args: tuple[Any, ...], kwargs: dict[str, Any], t: torch.Tensor) -> int | str:
    for i, a in enumerate(args):
        if a is t:
            return i
    for k, a in kwargs.items():
        if a is t:
            return k
    return 0


def _swap_token(slot: int | str, call: int, r: int, q: int, vocab: int) -> Swap:
    def swap(args: tuple[Any, ...], kwargs: dict[str, Any], k: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if k != call:
            return args, kwargs

        def bump(t: torch.Tensor) -> torch.Tensor:
            t = t.clone()
            t[r, q] = (t[r, q] + 1) % max(vocab, 2)
            return t

        if isinstance(slot, int) and slot < len(args):
            args = (*args[:slot], bump(args[slot]), *args[slot + 1 :])
        elif isinstance(slot, str) and slot in kwargs:
            kwargs = {**kwargs, slot: bump(kwargs[slot])}
        return args, kwargs

    return swap
