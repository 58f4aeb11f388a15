"""State kept across steps: tensors the model's modules or the task's own objects hold after an update.

A loss history kept as tensors (``self.history.append(loss)`` instead of ``loss.item()``), a running total kept as a
tensor (``self.total = self.total + loss``), a cache or a hidden state kept from the previous batch: each keeps
something alive after the update that used it, and when it stays attached to the autograd graph it keeps the graph
too, chained from one step to the next. Memory then grows with the steps of the long run, which the pilot's few
updates do not show as a peak.

Measured by walking what stays reachable after each update: every module's plain attributes and buffers, and the
objects behind the task's callables (a loss object's attributes, a function's closure and the module-level names it
reads), into lists, tuples, dicts and deques, a few levels deep. For each tensor found: its bytes and whether it holds
a graph (``grad_fn``), and the number of autograd nodes that graph reaches (bounded). Comparing the walks taken after
successive updates names the attribute whose graph or size grows.
"""

from __future__ import annotations

import collections
import inspect
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .gate import Gate

DEPTH = 4  # containers followed this deep
ITEMS = 100_000  # items of one container read at most
NODES = 20_000  # autograd nodes counted per walk at most
VISITS = 200_000  # objects walked per walk at most
SKIP = {
    "_parameters",
    "_modules",
    "_buffers",
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_state_dict_hooks",
}


@dataclass
class Held:
    """What one attribute holds: tensors, their bytes, how many hold a graph and the graph's autograd nodes."""

    tensors: int = 0
    nbytes: int = 0
    attached: int = 0
    nodes: int = 0


@dataclass
class Walk:
    held: dict[str, Held] = field(default_factory=dict)  # by attribute path
    nodes_capped: bool = False


def _graph_nodes(fn: Any, seen: set[int], budget: list[int]) -> int:
    count, stack = 0, [fn]
    while stack and budget[0] > 0:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        count += 1
        budget[0] -= 1
        stack.extend(nxt for nxt, _ in getattr(f, "next_functions", ()))
    return count


def _items(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for i, (k, v) in enumerate(value.items()):
            if i >= ITEMS:
                return
            yield f"[{k!r}]" if isinstance(k, (str, int)) else f"[{i}]", v
    elif isinstance(value, (list, tuple, collections.deque)):
        for i, v in enumerate(value):
            if i >= ITEMS:
                return
            yield f"[{i}]", v


def _add(walk: Walk, path: str, value: Any, depth: int, seen: set[int], budget: list[int], ids: set[int]) -> None:
    if len(ids) > VISITS:
        return  # a module-level dataset or vocabulary read by the loss: enough of it seen
    if torch.is_tensor(value):
        if id(value) in ids:
            return
        ids.add(id(value))
        h = walk.held.setdefault(path, Held())
        h.tensors += 1
        h.nbytes += value.numel() * value.element_size() if not value.is_meta else 0
        if value.grad_fn is not None:
            h.attached += 1
            h.nodes += _graph_nodes(value.grad_fn, seen, budget)
        return
    if depth >= DEPTH or isinstance(value, (str, bytes, int, float, bool, type(None), nn.Module)):
        return
    if isinstance(value, (dict, list, tuple, collections.deque)):
        if id(value) in ids:
            return
        ids.add(id(value))
        for _, v in _items(value):  # a container's tensors count under the container's own name
            _add(walk, path, v, depth + 1, seen, budget, ids)
        return
    inner = getattr(value, "__dict__", None)
    if isinstance(inner, dict) and not isinstance(value, (types.ModuleType, type, types.FunctionType)):
        if id(value) in ids:
            return
        ids.add(id(value))
        for k, v in list(inner.items()):
            _add(walk, f"{path}.{k}", v, depth + 1, seen, budget, ids)


def _callable_roots(name: str, fn: Any) -> Iterator[tuple[str, Any]]:
    """The objects a task callable can keep state in: a bound method's object, a callable object's attributes, a
    function's closure cells and the module-level names its code reads."""
    if fn is None:
        return
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        yield f"{type(owner).__name__} (Task.{name}'s object)", owner
        fn = getattr(fn, "__func__", fn)
    if not isinstance(fn, types.FunctionType):
        if hasattr(fn, "__dict__") and not isinstance(fn, (type, types.BuiltinFunctionType)):
            yield f"{type(fn).__name__} (Task.{name})", fn
            call = inspect.getattr_static(type(fn), "__call__", None)
            if isinstance(call, types.FunctionType):
                yield from _function_roots(name, call)
        return
    yield from _function_roots(name, fn)


def _function_roots(name: str, fn: types.FunctionType) -> Iterator[tuple[str, Any]]:
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
        try:
            yield f"{fn.__qualname__}'s {var}", cell.cell_contents
        except ValueError:  # an empty cell
            continue
    module = fn.__globals__.get("__name__", "")
    for var in fn.__code__.co_names:
        if var in fn.__globals__:
            v = fn.__globals__[var]
            if isinstance(v, (list, dict, collections.deque)) or torch.is_tensor(v):
                yield f"{module}.{var}", v


def walk(model: nn.Module, task: Any) -> Walk:
    """Every tensor kept on the model's modules (plain attributes, buffers) and in the task's callables' objects."""
    w, budget = Walk(), [NODES]
    seen: set[int] = set()  # autograd nodes counted
    ids: set[int] = {id(p) for p in model.parameters()}  # objects walked (parameters are not state)
    for mname, module in model.named_modules():
        where = mname or type(model).__name__
        params = module._parameters
        for attr, value in vars(module).items():
            if attr in SKIP or isinstance(value, nn.Module):
                continue
            if f"{attr}_orig" in params or f"{attr}_g" in params:
                continue  # spectral_norm's and weight_norm's weight, recomputed from its parameters at every call
            _add(w, f"{where}.{attr}", value, 0, seen, budget, ids)
        for bname, buf in module.named_buffers(recurse=False):
            if buf is not None and buf.grad_fn is not None:  # a buffer is state by design; one holding a graph is not
                _add(w, f"{where}.{bname}", buf, 0, seen, budget, ids)
    for name in ("loss", "collate", "predict"):
        for path, obj in _callable_roots(name, getattr(task, name, None)):
            if isinstance(obj, nn.Module):
                continue
            _add(w, path, obj, 0, seen, budget, ids)
    w.nodes_capped = budget[0] <= 0
    return w


@dataclass
class Growth:
    path: str
    first: Held
    last: Held

    @property
    def attached(self) -> bool:
        return self.last.attached > 0

    @property
    def grows(self) -> bool:
        f, la = self.first, self.last
        return la.tensors > f.tensors or la.nodes > f.nodes or la.nbytes > f.nbytes


def compare(walks: list[Walk]) -> list[Growth]:
    """Per attribute found in the last walk: what it held in the first and in the last, largest growth first."""
    if not walks:
        return []
    first, last = walks[0], walks[-1]
    out = [Growth(p, first.held.get(p, Held()), h) for p, h in last.held.items()]
    monotone = []
    for gr in out:
        series = [w.held.get(gr.path, Held()) for w in walks]
        rising = all(
            b.tensors >= a.tensors and b.nodes >= a.nodes and b.nbytes >= a.nbytes
            for a, b in zip(series, series[1:], strict=False)
        )
        if gr.attached or (gr.grows and rising):
            monotone.append(gr)
    monotone.sort(key=lambda g: (-(g.last.nodes - g.first.nodes), -(g.last.nbytes - g.first.nbytes)))
    return monotone


NAME = "no state kept attached across updates"
PROJECTED_WARN = 256 * 2**20  # bytes a detached history may reach over the run's updates before it is named


def _n(k: int, word: str) -> str:
    return f"{k:,} {word}" + ("" if k == 1 else "s")


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**14 else f"{int(n):,} bytes"


def judge(g: Gate, walks: list[Walk], updates: int | None, allocated: list[int] | None = None) -> None:
    """The check over the walks taken after each of ``len(walks) - 1`` updates (``g`` is update_second's gate);
    ``updates``: the run's, for a projection (10,000 when the campaign does not say)."""
    k = len(walks) - 1
    run = f"the run's {updates:,} updates" if updates else "10,000 updates"
    updates = updates or 10_000
    if k < 1:
        g.not_applicable(NAME, "fewer than two updates measured")
        return
    if allocated and len(allocated) > 1:
        g.extra["allocated_after_update"] = allocated
    found = compare(walks)
    growing = [gr for gr in found if gr.attached and gr.grows]
    kept = [gr for gr in found if gr.attached and not gr.grows]
    history = [gr for gr in found if not gr.attached and gr.grows]
    g.extra["kept_state"] = [
        {
            "attribute": gr.path,
            "tensors": [gr.first.tensors, gr.last.tensors],
            "bytes": [gr.first.nbytes, gr.last.nbytes],
            "graph_nodes": [gr.first.nodes, gr.last.nodes],
            "attached": gr.last.attached,
        }
        for gr in found[:8]
    ]
    mem = ""
    if allocated and len(allocated) > 1:
        mem = f"; allocated memory after each update: {', '.join(_mib(a) for a in allocated)}"
    if growing:
        parts = [
            f"{gr.path} holds {_n(gr.last.tensors, 'tensor')} of {_mib(gr.last.nbytes)} ({gr.last.attached} attached to the "
            f"autograd graph, {gr.last.nodes:,} graph nodes{'+' if walks[-1].nodes_capped else ''}) after {k} more "
            f"updates, from {gr.first.tensors} and {gr.first.nodes:,} nodes: "
            f"+{(gr.last.nodes - gr.first.nodes) / k:,.0f} graph nodes per update"
            for gr in growing[:3]
        ]
        g.check(
            NAME,
            False,
            "; ".join(parts) + mem + ": a tensor kept from each step still holds its graph (a loss history or "
            "running total kept as a tensor, a state kept from the previous batch), so memory grows with every "
            f"step of the long run ({run}). Keep a number (loss.item()) or a detached tensor "
            "(.detach()), and detach a state carried to the next batch",
        )
        return
    if kept:
        parts = [
            f"{gr.path} holds {_n(gr.last.attached, 'tensor')} attached to the autograd graph ({gr.last.nodes:,} nodes) "
            "after the update"
            for gr in kept[:3]
        ]
        g.check(
            NAME,
            False,
            "; ".join(parts) + mem + f", the same after {k} more updates: it does not grow, but keeps one step's "
            "graph (and what it saved) alive beside the next, and a backward through it would walk into a freed "
            "graph; keep it detached (.detach()) unless the next step must back-propagate into it",
            warn=True,
        )
        return
    if history:
        gr = history[0]
        per = (gr.last.nbytes - gr.first.nbytes) / k
        projected = per * updates
        words = (
            f"{gr.path} grows by {_mib(per)} per update, detached ({gr.first.tensors} tensors, then "
            f"{gr.last.tensors} after {k} updates): about {_mib(projected)} over {run}"
        )
        if projected >= PROJECTED_WARN:
            g.check(
                NAME,
                False,
                words + mem + ": a history kept as tensors; keep numbers (.item()) or bound it (a deque with maxlen)",
                warn=True,
            )
        else:
            g.check(NAME, True, words + mem + ", no graph attached")
        return
    g.check(
        NAME,
        True,
        f"no tensor on the model's modules or the task's objects holds an autograd graph after an update, and none "
        f"grows across {k} updates{mem}",
    )
