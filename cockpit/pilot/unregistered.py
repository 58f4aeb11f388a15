"""Every tensor the loss trains is a registered parameter of the model (silent errors, class 13).

A layer kept in a plain Python list (``self.blocks = [nn.Linear(...)]`` instead of ``nn.ModuleList``) or a weight
made as ``torch.randn(..., requires_grad=True)`` instead of ``nn.Parameter`` is used by ``forward`` and gets a
gradient, but ``model.parameters()`` does not list it: the optimizer never updates it, ``state_dict()`` never saves
it, ``.to(device)`` never moves it. On the CPU the run finishes, the loss falls through the other layers, and the
checkpoint, the resume and the export all agree, because a new process makes the same tensor again from the same
seed. Measured on the first microbatch's graph: every leaf tensor that requires grad and that the loss reaches
(autograd's ``AccumulateGrad`` nodes) must be one of the model's parameters. A leaf found elsewhere in the model's
objects (an attribute, a list, a dict) is named by its path; one made in the loss itself (an adversarial
perturbation) is not the model's and is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

NAME = "every trained tensor is registered"
DEPTH = 3  # how deep lists, tuples and dicts held by a module are searched


@dataclass(frozen=True)
class Stray:
    """A tensor the loss trains that is not a registered parameter of the model."""

    path: str  # where the model holds it: "blocks[1].weight", "scale"
    shape: tuple[int, ...]
    in_optimizer: bool  # the optimizer updates it (so it trains, but no checkpoint holds it)


def leaves(loss: torch.Tensor) -> list[torch.Tensor]:
    """The leaf tensors requiring grad that ``loss``'s graph reaches, each once."""
    out: dict[int, torch.Tensor] = {}
    stack = [loss.grad_fn] if loss.grad_fn is not None else []
    seen: set[int] = set()
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        var = getattr(fn, "variable", None)  # AccumulateGrad holds the leaf it accumulates into
        if isinstance(var, torch.Tensor):
            out.setdefault(id(var), var)
        stack.extend(nxt for nxt, _ in getattr(fn, "next_functions", ()) if nxt is not None)
    return list(out.values())


def held(models: Iterable[torch.nn.Module]) -> set[int]:
    """The tensors requiring grad that the models' objects hold outside their registries, before a forward: a
    tensor that forward itself makes and keeps (a physics-informed network's input coordinates, a perturbation)
    is the forward's, not a weight left out."""
    out: set[int] = set()
    for model in models:
        for module in model.modules():
            for attr, value in vars(module).items():
                if not attr.startswith("_"):
                    _collect(value, out, 0)
    return out


def _collect(value: Any, out: set[int], depth: int) -> None:
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            out.add(id(value))
    elif isinstance(value, torch.nn.Module):
        out.update(id(p) for p in value.parameters() if p.requires_grad)
    elif depth < DEPTH and isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, out, depth + 1)
    elif depth < DEPTH and isinstance(value, dict):
        for v in value.values():
            _collect(v, out, depth + 1)


def strays(
    models: Iterable[torch.nn.Module], loss: torch.Tensor, optimizers: Iterable[Any], before: set[int] | None = None
) -> list[Stray]:
    """The tensors the loss trains that the models held outside their registered parameters (``before``: the
    ids :func:`held` found before the forward; a script's models are each named by their class, where several)."""
    models = list(models)
    registered = {id(p) for m in models for p in m.parameters()}
    stepped = {id(p) for o in optimizers for group in getattr(o, "param_groups", ()) for p in group.get("params", ())}
    found: list[Stray] = []
    for t in leaves(loss):
        if id(t) in registered or (before is not None and id(t) not in before):
            continue
        for m in models:
            path = held_at(m, t)
            if path is not None:
                where = f"{type(m).__name__}.{path}" if len(models) > 1 else path
                found.append(Stray(where, tuple(t.shape), id(t) in stepped))
                break
    return sorted(found, key=lambda s: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", s.path)])


def held_at(model: torch.nn.Module, t: torch.Tensor) -> str | None:
    """Where the model's objects hold ``t`` outside the registries (``_parameters``, ``_buffers``, ``_modules``)."""
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            path = _search(value, t, f"{name}.{attr}" if name else attr, 0)
            if path is not None:
                return path
    return None


def _search(value: Any, t: torch.Tensor, path: str, depth: int) -> str | None:
    if value is t:
        return path
    if isinstance(value, torch.nn.Module):  # a module outside the registry (a plain list's layer): its parameters
        return next((f"{path}.{n}" for n, p in value.named_parameters() if p is t), None)
    if depth >= DEPTH:
        return None
    items: list[tuple[str, Any]] = []
    if isinstance(value, (list, tuple)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f"{path}[{k!r}]", v) for k, v in value.items()]
    for where, v in items:
        got = _search(v, t, where, depth + 1)
        if got is not None:
            return got
    return None


def describe(found: list[Stray]) -> str:
    """The finding in words, with the remedy."""
    names = ", ".join(f"{s.path} {list(s.shape)}" for s in found[:4]) + (
        f" (+{len(found) - 4} more)" if len(found) > 4 else ""
    )
    stepped = [s for s in found if s.in_optimizer]
    fate = (
        "the optimizer updates them, but state_dict() does not hold them, so every checkpoint and export loses "
        "what they learned"
        if len(stepped) == len(found)
        else "the optimizer never updates them, state_dict() never saves them and .to(device) never moves them, "
        "so they stay at their initial values while the rest of the model trains around them"
    )
    return (
        f"the loss trains {len(found)} tensor{'s' if len(found) > 1 else ''} the model does not register as "
        f"parameters: {names}: {fate}. Hold layers in nn.ModuleList or nn.ModuleDict (not a list or dict), and "
        "weights as nn.Parameter (not a tensor made with requires_grad=True)"
    )
