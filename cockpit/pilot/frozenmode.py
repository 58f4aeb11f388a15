"""Frozen modules left in training mode: a teacher, a reference model, a frozen encoder with dropout or BatchNorm.

``model.train()`` sets every submodule to training mode, the frozen ones too, unless the code calls ``.eval()`` on
them afterwards (or overrides ``train()``). A frozen module whose behaviour depends on the mode then gives random
outputs (dropout) or outputs from batch statistics while its running statistics drift (BatchNorm). Measured, not
inferred from the module's types:

- which modules are frozen: the largest submodules with parameters none of which requires grad, whose parent has
  one that does (a teacher, a reference, a frozen encoder), and which some module inside reads ``self.training``;
- that they feed the loss, and in which mode: a forward pre-hook records their first call during the pilot's forward
  (its inputs, and whether any submodule was in training mode);
- that their behaviour depends on the mode: the recorded call is run again twice in training mode and once in eval
  mode (no grad, the random state and the buffers kept), so random outputs, batch statistics and the running
  statistics' drift are figures;
- what their output is to the loss: a *target* (a teacher's logits, a reference's log-probabilities, compared with
  the trained model's) or a *feature* the trained parameters transform (a frozen encoder under a trained head).
  One more no-grad pass of the loss follows the module's output through every torch operation: a feature meets a
  trainable parameter in some operation, a target never does.

A random or batch-dependent target changes the objective (the student fits noise, the DPO margin is noisy): a
failure. A frozen feature extractor whose BatchNorm statistics drift is a warning (what is frozen changes, and
evaluation sees other statistics than training); dropout on frozen features acts as noise on the head's input, as
input dropout does, and is said in the check's detail without a warning.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .gate import Gate
from .rng import rng_state, set_rng_state

MAX_MODULES = 8  # frozen modules measured at most (the largest first): each costs three of its own forwards
TOLERANCE = 1e-5  # relative difference below which two outputs are the same


@dataclass
class Call:
    """The first call of a frozen module during the pilot's forward."""

    name: str
    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    training: bool  # some submodule was in training mode at the call


@dataclass
class Measured:
    name: str
    parameters: int
    random: float  # relative difference between two training-mode calls on the same input
    modes: float  # relative difference between a training-mode call and an eval-mode one
    drift: float  # largest relative change of a BatchNorm running statistic in one training-mode call
    drifted: str  # the buffer that changed most
    kinds: list[str] = field(default_factory=list)  # what inside reads self.training (Dropout(p=0.1), BatchNorm2d)
    role: str = ""  # "target", "feature" or "unknown"

    @property
    def dependent(self) -> bool:
        return self.random > TOLERANCE or self.modes > TOLERANCE or self.drift > TOLERANCE


_READS: dict[type, bool] = {}


def reads_training(module: nn.Module) -> bool:
    """Whether the module's own forward reads ``self.training`` (by its source; a forward without source may)."""
    cls = type(module)
    if cls not in _READS:
        try:
            _READS[cls] = "self.training" in inspect.getsource(cls.forward)
        except (OSError, TypeError):
            _READS[cls] = True
    return _READS[cls]


def mode_dependent(module: nn.Module) -> list[str]:
    """The modules inside whose forward reads ``self.training``, by kind (dropout with p = 0 does nothing)."""
    kinds: dict[str, None] = {}
    for m in module.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p == 0:
            continue
        if reads_training(m):
            what = (
                f"{type(m).__name__}(p={m.p:g})" if isinstance(m, nn.modules.dropout._DropoutNd) else type(m).__name__
            )
            kinds[what] = None
    # dropout and normalisation first: they say why; a container that reads self.training says little
    return sorted(kinds, key=lambda k: (not k.startswith(("Dropout", "BatchNorm", "SyncBatchNorm", "InstanceNorm")), k))


def frozen_parts(model: nn.Module, trainable: set[str]) -> list[tuple[str, nn.Module]]:
    """The largest submodules holding parameters, none of them trainable, under a parent that trains something,
    and whose behaviour may depend on the mode; the largest first."""
    train_ids = {id(p) for n, p in model.named_parameters() if n in trainable}
    if not train_ids:
        return []  # nothing trains: the backward gate says so
    found: list[tuple[str, nn.Module, int]] = []

    def walk(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            qual = f"{prefix}.{name}" if prefix else name
            ps = list(child.parameters())
            if not ps:
                continue
            if any(id(p) in train_ids for p in ps):
                walk(qual, child)
            elif mode_dependent(child):
                found.append((qual, child, sum(p.numel() for p in ps)))

    walk("", model)
    found.sort(key=lambda t: -t[2])
    return [(n, m) for n, m, _ in found[:MAX_MODULES]]


@contextlib.contextmanager
def recorder(model: nn.Module, trainable: set[str]) -> Iterator[dict[str, Call]]:
    """While active, the first call of each frozen part (see :func:`frozen_parts`), with its inputs and mode."""
    calls: dict[str, Call] = {}
    handles = []
    for name, module in frozen_parts(model, trainable):

        def hook(mod: nn.Module, args: Any, kwargs: Any, name: str = name) -> None:
            if name not in calls:
                training = any(m.training for m in mod.modules())
                calls[name] = Call(name, mod, tuple(args), dict(kwargs), training)

        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


def _tensors(out: Any, depth: int = 0) -> list[torch.Tensor]:
    if torch.is_tensor(out):
        return [out] if out.is_floating_point() else []
    if depth > 3:
        return []
    if isinstance(out, dict):
        return [t for v in out.values() for t in _tensors(v, depth + 1)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _tensors(v, depth + 1)]
    to_tuple = getattr(out, "to_tuple", None)  # a Hugging Face ModelOutput
    if callable(to_tuple):
        return [t for v in to_tuple() for t in _tensors(v, depth + 1)]
    return []


def _difference(a: Any, b: Any) -> float:
    ta, tb = _tensors(a), _tensors(b)
    if len(ta) != len(tb) or not ta:
        return 0.0
    worst = 0.0
    for x, y in zip(ta, tb, strict=True):
        if x.shape != y.shape:
            continue
        x, y = x.detach().float(), y.detach().float()
        scale = float(x.abs().max()) if x.numel() else 0.0
        worst = max(worst, float((x - y).abs().max()) / max(scale, 1e-12) if x.numel() else 0.0)
    return worst


def _norm_stats(module: nn.Module) -> dict[str, torch.Tensor]:
    return {
        f"{mname}.{b}" if mname else b: buf.detach().clone()
        for mname, m in module.named_modules()
        if isinstance(m, nn.modules.batchnorm._NormBase)
        for b, buf in m.named_buffers(recurse=False)
        if buf is not None and buf.is_floating_point()
    }


@contextlib.contextmanager
def kept_state(module: nn.Module) -> Iterator[None]:
    """The random streams, every buffer and every submodule's mode as they were, whatever runs inside."""
    rng = rng_state()
    buffers = {n: b.detach().clone() for n, b in module.named_buffers() if b is not None and b.dtype != torch.bool}
    modes = [(m, m.training) for m in module.modules()]
    try:
        yield
    finally:
        set_rng_state(rng)
        with torch.no_grad():
            for n, b in module.named_buffers():
                if n in buffers and b is not None:
                    b.copy_(buffers[n])
        for m, was in modes:
            m.training = was


def measure(call: Call, autocast: Callable[[], Any] = contextlib.nullcontext) -> Measured:
    """Run the recorded call twice in training mode and once in eval mode (under the run's ``autocast``, as the
    pilot's forward ran it), and compare."""
    mod = call.module
    n_params = sum(p.numel() for p in mod.parameters())
    with torch.no_grad(), kept_state(mod), autocast():
        mod.train()
        before = _norm_stats(mod)
        a = mod(*call.args, **call.kwargs)
        after = _norm_stats(mod)
        b = mod(*call.args, **call.kwargs)
        mod.eval()
        c = mod(*call.args, **call.kwargs)
    drift, drifted = 0.0, ""
    for k, v in before.items():
        if "num_batches" in k or k not in after:
            continue
        change = float((after[k] - v).abs().max()) / max(float(v.abs().max()), 1e-6)
        if change > drift:
            drift, drifted = change, k
    return Measured(call.name, n_params, _difference(a, b), _difference(a, c), drift, drifted, mode_dependent(mod))


class _Taint(TorchFunctionMode):
    """Follows frozen modules' outputs through every torch operation: which reach the loss, and which meet a
    trainable parameter on the way (then they are features the trained parameters transform)?"""

    def __init__(self, trainable: set[int]) -> None:
        super().__init__()
        self.trainable = trainable
        self.tainted: dict[int, tuple[torch.Tensor, frozenset[str]]] = {}  # id -> (tensor held, its sources)
        self.met: set[str] = set()

    def mark(self, out: Any, names: frozenset[str]) -> None:
        for t in _all_tensors(out):
            held = self.tainted.get(id(t))
            self.tainted[id(t)] = (t, names | held[1] if held else names)

    def sources(self, x: Any) -> frozenset[str]:
        found: frozenset[str] = frozenset()
        for t in _all_tensors(x):
            held = self.tainted.get(id(t))
            if held is not None:
                found = found | held[1]
        return found

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = _all_tensors((args, kwargs))
        names: frozenset[str] = frozenset()
        for t in ins:
            held = self.tainted.get(id(t))
            if held is not None:
                names = names | held[1]
        if names:
            if any(id(t) in self.trainable for t in ins):
                self.met |= names
            self.mark(out, names)
        return out


def _all_tensors(x: Any, depth: int = 0) -> list[torch.Tensor]:
    if torch.is_tensor(x):
        return [x]
    if depth > 3:
        return []
    if isinstance(x, dict):
        return [t for v in x.values() for t in _all_tensors(v, depth + 1)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _all_tensors(v, depth + 1)]
    to_tuple = getattr(x, "to_tuple", None)
    if callable(to_tuple):
        return [t for v in to_tuple() for t in _all_tensors(v, depth + 1)]
    return []


def roles(model: nn.Module, trainable: set[str], calls: list[Call], run_loss: Any) -> dict[str, str]:
    """Per recorded module, in one no-grad pass of the loss: ``target`` when its output reaches the loss without
    meeting a trainable parameter, ``feature`` when it meets one, ``unknown`` when it was not followed to the loss
    (an operation outside torch's functions)."""
    params = {id(p) for n, p in model.named_parameters() if n in trainable}
    mode = _Taint(params)
    handles = []
    for c in calls:

        def hook(mod: nn.Module, args: Any, out: Any, name: str = c.name) -> None:
            mode.mark(out, frozenset({name}))

        handles.append(c.module.register_forward_hook(hook))
    try:
        with torch.no_grad(), kept_state(model), mode:
            loss = run_loss()
    finally:
        for h in handles:
            h.remove()
    reached = mode.sources(loss)
    return {c.name: "feature" if c.name in mode.met else "target" if c.name in reached else "unknown" for c in calls}


NAME = "frozen modules in eval mode"


def judge(
    g: Gate,
    model: nn.Module,
    trainable: set[str],
    calls: dict[str, Call],
    run_loss: Any,
    autocast: Callable[[], Any] = contextlib.nullcontext,
) -> None:
    """The check over what :func:`recorder` saw in the pilot's forward (``g`` is the forward phase's gate)."""
    if not calls:
        g.not_applicable(
            NAME,
            "no frozen module (parameters none of which requires grad, beside parameters that do) with dropout, "
            "BatchNorm or another forward that reads self.training fed the loss",
        )
        return
    in_eval = sorted(n for n, c in calls.items() if not c.training)
    try:
        found = [measure(c, autocast) for n, c in calls.items() if c.training]
    except Exception as exc:  # the module refuses to be called again on its recorded input: nothing measured
        g.not_applicable(
            NAME,
            f"{', '.join(n for n, c in calls.items() if c.training)} ran in training mode, but calling it again on "
            f"its recorded input raised {type(exc).__name__}: {str(exc)[:160]}",
        )
        return
    quiet = [m.name for m in found if not m.dependent]
    loud = [m for m in found if m.dependent]
    if not loud:
        parts = []
        if in_eval:
            parts.append(f"{', '.join(in_eval)} ran in eval mode")
        if quiet:
            parts.append(
                f"{', '.join(quiet)} ran in training mode with the same outputs as in eval mode (measured on the "
                "first microbatch: no active dropout or batch statistics)"
            )
        if in_eval:
            g.check(NAME, True, "; ".join(parts))
        else:
            g.not_applicable(NAME, "; ".join(parts) + ": no mode-dependent behaviour to keep off")
        return
    try:
        found_roles = roles(model, trainable, [calls[m.name] for m in loud], run_loss)
    except Exception:  # the loss refuses a second pass: its role stays unknown, which warns rather than fails
        found_roles = {m.name: "unknown" for m in loud}
    for m in loud:
        m.role = found_roles[m.name]
    bad = [m for m in loud if m.role == "target"]
    unknown = [m for m in loud if m.role == "unknown"]
    drifting = [m for m in loud if m.role == "feature" and m.drift > TOLERANCE]
    noisy = [m for m in loud if m.role == "feature" and m.drift <= TOLERANCE]
    g.extra["frozen_modes"] = [
        {
            "module": m.name,
            "parameters": m.parameters,
            "random": m.random,
            "modes": m.modes,
            "drift": m.drift,
            "role": m.role,
            "inside": m.kinds[:4],
        }
        for m in loud
    ]
    remedy = (
        "Call .eval() on {names} after every model.train() (in the loss, or override train() in the module that "
        "holds {it} so it stays in eval mode)"
    )
    if bad:
        words = "; ".join(_figures(m) for m in bad)
        names = ", ".join(f"{m.name}" for m in bad)
        g.check(
            NAME,
            False,
            f"{words}. Its output reaches the loss as a target (it meets no trained parameter on the way): the "
            f"long run fits {'a random target' if any(m.random > TOLERANCE for m in bad) else 'a target computed from batch statistics'}"
            f" instead of the frozen model's (its eval-mode output). "
            + remedy.format(names=names, it="it" if len(bad) == 1 else "them"),
        )
        return
    if unknown:
        words = "; ".join(_figures(m) for m in unknown)
        names = ", ".join(m.name for m in unknown)
        g.check(
            NAME,
            False,
            f"{words}. Whether its output is a target or a feature the trained parameters transform could not be "
            "followed to the loss (an operation outside torch's functions): if it is a teacher or a reference, the long "
            "run fits a target that changes from call to call. "
            + remedy.format(names=names, it="it" if len(unknown) == 1 else "them"),
            warn=True,
        )
        return
    if drifting:
        words = "; ".join(_figures(m) for m in drifting)
        names = ", ".join(m.name for m in drifting)
        g.check(
            NAME,
            False,
            f"{words}. Its output is a feature the trained parameters transform, but what is frozen still changes: its "
            "running statistics follow the training batches, so evaluation and export see statistics other than "
            "the ones it was frozen with (unusual but sometimes meant). "
            + remedy.format(names=names, it="it" if len(drifting) == 1 else "them"),
            warn=True,
        )
        return
    words = "; ".join(_figures(m) for m in noisy)
    g.check(
        NAME,
        True,
        f"{words}: its output is a feature the trained parameters transform (not a target), so this acts as noise on "
        f"their input, like input dropout; if it is not meant, call .eval() on {', '.join(m.name for m in noisy)} "
        "after model.train()",
    )


def _figures(m: Measured) -> str:
    inside = ", ".join(m.kinds[:3]) + (" ..." if len(m.kinds) > 3 else "")
    parts = [f"{m.name} ({m.parameters:,} parameters, none requires grad) ran in training mode while it fed the loss"]
    if m.random > TOLERANCE:
        parts.append(f"two calls on the same input differ by {m.random:.2g} (relative): its outputs are random")
    elif m.modes > TOLERANCE:
        parts.append(f"its training-mode output differs from its eval-mode output by {m.modes:.2g} (relative)")
    if m.random > TOLERANCE and m.modes > TOLERANCE:
        parts.append(f"and from its eval-mode output by {m.modes:.2g}")
    if m.drift > TOLERANCE:
        parts.append(f"one call moved its BatchNorm statistic {m.name}.{m.drifted} by {m.drift:.2g} (relative)")
    return ", ".join(parts) + (f" (inside: {inside})" if inside else "")
