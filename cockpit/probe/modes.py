"""Whether the script's model behaves differently in training mode: what decides if a mode check applies.

``model.eval()`` matters only where some module reads the mode: dropout, batch norm's batch statistics and
running averages, a module whose own ``forward`` reads ``self.training``. A model with none of them gives the
same output in both modes, so an evaluation run in training mode (a char-level LM sampled between steps, with
no dropout) changes nothing, and a check that it called ``model.eval()`` would be a false alarm.

Read in two steps. First the model's code: each module's kind (``Dropout`` with p > 0, ``BatchNorm`` and
``InstanceNorm`` that track running statistics, a recurrent layer or ``MultiheadAttention`` with dropout) and,
for a module class outside ``torch.nn``, whether its ``forward`` reads ``.training``. A model with none is
indifferent, nothing run. Otherwise the first training batch is run again in eval mode, without grad, and its
output compared with the training forward's: the same output means the mode changes nothing here (a dropout of
0, a flag read and ignored). The rerun leaves the script's state as it found it: the random generators are
forked, every buffer is copied back, each module's mode restored; a model whose buffers hold more than
``RERUN_BUFFERS`` bytes is not rerun (its mode is taken to matter).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

RERUN_BUFFERS = 64 * 2**20
TRAINING = re.compile(r"\.training\b")
DROPOUT = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)
_SOURCE: dict[type, bool] = {}  # per class: its forward reads .training (read once per class)


@dataclass(frozen=True)
class ModeReading:
    """What the model's mode changes: ``matters`` False only when measured so (by its code or a rerun)."""

    matters: bool
    words: str


def dependent(model: torch.nn.Module) -> list[str]:
    """The modules whose kind or code makes training mode differ from eval mode ("name (why)")."""
    out: list[str] = []
    for name, m in model.named_modules():
        why = _why(m)
        if why:
            out.append(f"{name or type(m).__name__} ({why})")
    return out


def _why(m: torch.nn.Module) -> str:
    kind = type(m).__name__
    if isinstance(m, DROPOUT):
        return f"{kind} p={m.p}" if m.p > 0 else ""
    if re.search(r"(Batch|Instance)Norm", kind) and getattr(m, "track_running_stats", False):
        return f"{kind}: batch statistics in training mode"
    if isinstance(m, torch.nn.RNNBase):
        return f"{kind} dropout={m.dropout}" if m.dropout > 0 and m.num_layers > 1 else ""
    if isinstance(m, torch.nn.MultiheadAttention):
        return f"{kind} dropout={m.dropout}" if m.dropout > 0 else ""
    if type(m).__module__.startswith("torch.nn"):
        return ""  # torch's other layers (Linear, Embedding, LayerNorm, a Transformer layer's parts) are read above
    return f"{kind}.forward reads self.training" if _reads_training(type(m)) else ""


def _reads_training(cls: type) -> bool:
    if cls not in _SOURCE:
        fwd = getattr(cls, "forward", None)
        try:
            src = inspect.getsource(fwd) if fwd is not None else ""
            _SOURCE[cls] = bool(TRAINING.search(src))
        except (OSError, TypeError):
            _SOURCE[cls] = True  # no source to read: taken to matter
    return _SOURCE[cls]


def floats(out: Any, depth: int = 0) -> list[torch.Tensor]:
    """The floating-point tensors of a model's output (a tensor, a tuple, a dict, a ModelOutput), in order."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if depth > 3:
        return []
    items = out.values() if isinstance(out, Mapping) else out if isinstance(out, (list, tuple)) else ()
    return [t for x in items for t in floats(x, depth + 1)]


def rerun_same(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], trained: list[torch.Tensor]
) -> bool | None:
    """The training forward's floating outputs (``trained``, detached) against the same call in eval mode, without
    grad: True when equal (to 1e-5 of their scale), False when not, None when it could not be told."""
    if not trained:
        return None
    buffers = [b for b in model.buffers() if isinstance(b, torch.Tensor)]
    if sum(b.numel() * b.element_size() for b in buffers) > RERUN_BUFFERS:
        return None
    modes = [(m, m.training) for m in model.modules()]
    saved = [b.detach().clone() for b in buffers]
    devices = [t.device.index or 0 for t in trained if t.device.type == "cuda"][:1]
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            model.eval()
            again = floats(model(*args, **kwargs))
    except Exception:  # noqa: BLE001 - a forward that cannot run twice: not told, so the mode is taken to matter
        return None
    finally:
        for m, mode in modes:
            m.training = mode
        with torch.no_grad():
            for b, s in zip(buffers, saved, strict=True):
                if b.shape == s.shape:
                    b.copy_(s)
    if len(again) != len(trained):
        return None
    for a, b in zip(trained, again, strict=True):
        if a.shape != b.shape:
            return False
        scale = float(a.detach().abs().max()) if a.numel() else 0.0
        if not torch.allclose(a.detach().float(), b.float(), rtol=0.0, atol=1e-5 * scale + 1e-7):
            return False
    return True


def reading(
    model: torch.nn.Module,
    call: tuple[tuple[Any, ...], Mapping[str, Any], list[torch.Tensor]] | None,
    rerun: torch.nn.Module | None = None,
) -> ModeReading:
    """What the mode changes for ``model``; ``call``: its first training forward (args, kwargs, outputs), if kept,
    run again on ``rerun`` (the model itself by default; a DDP wrapper's inner module, whose forward syncs nothing)."""
    kind = type(model).__name__
    found = dependent(model)
    if not found:
        return ModeReading(
            False,
            f"no module of {kind} behaves differently in training mode (no dropout, no batch norm, no "
            "forward that reads self.training)",
        )
    listed = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    same = rerun_same(rerun if rerun is not None else model, *call) if call is not None else None
    if same:
        return ModeReading(
            False,
            f"{kind}'s output on the first training batch is the same in eval mode as in training mode "
            f"(measured; its {listed} change nothing here)",
        )
    how = ": its output on the first training batch differs from eval mode's" if same is False else " by its code"
    return ModeReading(True, f"{kind} behaves differently in training mode{how}; mode-dependent: {listed}")
