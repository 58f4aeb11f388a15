"""Passes of the user's loss on a perturbed batch, recorded: what the batch-invariant checks of the data gate
(``phases/dependence.py``, ``independence.py``, ``targets_hidden.py``) compare.

Each pass runs the task's loss on the probe without gradients under one replayed random state and records the
model's output tensors, its arguments and, per module, two sums per example row (enough to tell which module first
mixed examples without holding every activation)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ..contract import Batch
from . import outputs
from .context import Context
from .datascan import batch_ids, ids_text
from .gate import Gate
from .rng import RngState, set_rng_state

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


def row_sums(t: torch.Tensor, n: int) -> torch.Tensor:
    x = t.detach().double().reshape(n, -1)
    return torch.stack([x.abs().sum(1), x.sum(1)], 1)


Swap = Callable[[tuple[Any, ...], dict[str, Any], int], tuple[tuple[Any, ...], dict[str, Any]]]


@contextmanager
def recording(model: torch.nn.Module, n: int, p: Pass, swap: Swap | None) -> Iterator[None]:
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
        p.mods[key] = row_sums(first, n)
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
    with torch.no_grad(), outputs.capture(model) as cap, recording(model, n, p, swap):
        lo = ctx.trainer.loss_call(batch, net=model)
    value = float(lo.value.detach().double())
    p.loss = value / float(lo.count) if lo.count is not None and float(lo.count) else value
    p.outs = [t for o in cap.outputs for t in tensors_of(o)]
    p.raw = list(cap.outputs)
    return p


def scale_of(t: torch.Tensor) -> float:
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
            x, y = others(x, rows, n, drop), others(y, rows, n, drop)
            if x.numel() == 0:
                continue
        d = float((x.double() - y.double()).abs().max()) / scale_of(x)
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


def others(t: torch.Tensor, rows: list[int], n: int, drop: int | None) -> torch.Tensor:
    """``rows`` of an output; of a (B, B) one (pairwise scores, or logits over as many classes as examples),
    without the column ``drop``: only the scores against the changed example may move."""
    t = t[rows]
    if drop is not None and pairwise_shape(t, n):
        keep = [c for c in range(n) if c != drop]
        t = t[:, keep]
    return t


def pairwise_shape(t: torch.Tensor, n: int) -> bool:
    return t.dim() == 2 and t.shape[1] == n


def differs(v: torch.Tensor) -> bool:
    return v.shape[0] >= 2 and not bool((v == v[:1]).all())


def roll(v: torch.Tensor) -> torch.Tensor:
    return torch.roll(v, 1, 0)


def tolerance(ctx: Context, noise: float) -> float:
    base = 1e-5 if ctx.trainer.precision == "fp32" else 2e-2
    return max(base, 8 * noise)


def rows_named(batch: Batch, rows: list[int]) -> str:
    ids = batch_ids(batch)
    return ids_text([str(ids[r]) if r < len(ids) else f"row {r}" for r in rows], 3)


def module_of(key: str) -> str:
    return key.split("#")[0]


def forward_args(model: torch.nn.Module) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


@dataclass
class Base:
    """The unperturbed pass, its repeat under the same random state, and the loss under another state."""

    start: RngState
    first: Pass
    noise_out: float
    noise_loss: float
    draw_loss: float  # the loss's change under a different random state (a stochastic objective)
    n: int


def grad_at_outputs(ctx: Context, model: torch.nn.Module, batch: Batch, start: RngState) -> list[torch.Tensor]:
    set_rng_state(start)
    with torch.enable_grad(), outputs.capture(model) as cap:
        lo = ctx.trainer.loss_call(batch, net=model)
    outs = [t for o in cap.outputs for t in graph_tensors(o)]
    if not outs or not lo.value.requires_grad:
        return []
    grads = torch.autograd.grad(lo.value.float().sum(), outs, allow_unused=True)
    return [torch.zeros_like(o) if gr is None else gr.detach() for o, gr in zip(outs, grads, strict=True)]


def graph_tensors(out: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if torch.is_tensor(out):
        if out.is_floating_point() and out.requires_grad:
            yield out
    elif depth < 3 and isinstance(out, Mapping):
        for v in out.values():
            yield from graph_tensors(v, depth + 1)
    elif depth < 3 and isinstance(out, (tuple, list)):
        for v in out:
            yield from graph_tensors(v, depth + 1)


def gate_figures(g: Gate) -> dict[str, Any]:
    return g.extra.setdefault("dependence", {})  # type: ignore[return-value]


def pct(x: float) -> str:
    return f"{x:.1%}" if x >= 1e-3 else f"{x:.1e}"
