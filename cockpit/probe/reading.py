"""What the probe reads off tensors, files and the process: plain functions, no state.

Kept apart from the observer's layers because each of them reads these and none of them owns them. A
parameter's fingerprint is summed in float64 in bounded pieces so a large model does not need a second
copy of itself; the kernel's peak-RSS counter is read from ``/proc`` where Linux has one, and absent
elsewhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import torch

from .. import blame

HWM = re.compile(rb"VmHWM:\s+(\d+)\s+kB")


def optimizer_step_count(opt: torch.optim.Optimizer) -> float | None:
    for state in opt.state.values():
        s = state.get("step") if isinstance(state, dict) else None
        if s is not None:
            try:
                return float(s)
            except (TypeError, ValueError, RuntimeError):
                return None
    return None


def first_tensor(args: Any, kwargs: Mapping[str, object] | None) -> torch.Tensor | None:
    for a in list(args or ()) + list((kwargs or {}).values()):
        if isinstance(a, torch.Tensor):
            return a
        if isinstance(a, dict):
            for v in a.values():
                if isinstance(v, torch.Tensor):
                    return v
    return None


def _tensors(args: Any, kwargs: Mapping[str, object] | None) -> list[torch.Tensor]:
    """The tensors a call was given: positional and keyword, and one level inside tuples, lists and dicts."""
    out: list[torch.Tensor] = []
    for a in list(args or ()) + list((kwargs or {}).values()):
        inner = a.values() if isinstance(a, dict) else a if isinstance(a, (list, tuple)) else [a]
        out.extend(x for x in inner if isinstance(x, torch.Tensor))
    return out


def batch_dim(
    module: torch.nn.Module,
    args: Any,
    kwargs: Mapping[str, object] | None,
    loader_sizes: set[int] | frozenset[int] = frozenset(),
) -> tuple[int, str] | None:
    """Which dimension of the model's first input is the batch, and how that was read; None without a tensor.

    Dim 0 unless something says otherwise: the environment's COCKPIT_PROBE_BATCH_DIM; the script's data
    loaders, when they all have one batch_size that dim 0 is not and exactly one other dim is; a recurrent
    layer inside the model built time-major (``batch_first=False``), its input [time, batch, ...], confirmed
    by the call's other tensors (a state [layers, batch, hidden]) holding dim 1's size and not dim 0's.
    """
    tensors = [t for t in _tensors(args, kwargs) if t.dim() > 0]
    if not tensors:
        return None
    first, rest = tensors[0], tensors[1:]
    given = os.environ.get("COCKPIT_PROBE_BATCH_DIM", "")
    if given.isdigit() and int(given) < first.dim():
        return int(given), "COCKPIT_PROBE_BATCH_DIM"
    if len(loader_sizes) == 1:
        (bs,) = loader_sizes
        dims = [d for d in range(first.dim()) if first.shape[d] == bs]
        if first.shape[0] != bs and len(dims) == 1:
            return dims[0], f"the data loader's batch_size ({bs})"
    rnn = next((m for m in module.modules() if isinstance(m, torch.nn.RNNBase)), None)
    if rnn is not None and not rnn.batch_first and first.dim() >= 2:
        others = [t for t in rest if t.dim() >= 2]
        agree = all(first.shape[1] in t.shape and first.shape[0] not in t.shape for t in others)
        if agree:
            return 1, f"{type(rnn).__name__}(batch_first=False): the input is [time, batch]"
    return 0, ""


def input_shapes(args: Any, kwargs: Mapping[str, object] | None) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, a in enumerate(args or ()):
        if isinstance(a, torch.Tensor):
            out[f"arg{i}"] = list(a.shape)
        elif isinstance(a, dict):
            out.update({str(k): list(v.shape) for k, v in a.items() if isinstance(v, torch.Tensor)})
    out.update({str(k): list(v.shape) for k, v in (kwargs or {}).items() if isinstance(v, torch.Tensor)})
    return dict(list(out.items())[:8])


def loss_of(output: Any) -> torch.Tensor | None:
    """The loss a model returned with its output (Hugging Face: ``.loss`` or ``["loss"]``), if any."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    return loss if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


def short_list(names: list[str], k: int = 4) -> str:
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def user_frame(exc: BaseException) -> str:
    """The deepest frame of the script's own code ('file:line in function'), by :mod:`cockpit.blame`'s rule:
    not torch, not a library (named beside it when the exception passed through one), not Cockpit."""
    return blame.of(exc).where or "no frame"


def cockpit_raised(exc: BaseException) -> bool:
    """Whether the exception is Cockpit's, not the script's, by :mod:`cockpit.blame`'s rule (the deepest frame
    outside torch and the standard library is Cockpit's, and no state the script left explains it): a bug in
    Cockpit, never the script's, even when it ends the script."""
    return bool(blame.frames_of(exc)) and not blame.of(exc).user


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def describe_inputs(inputs: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in inputs.items()) or "none"


def file_position(target: Any) -> int | None:
    try:
        return int(target.tell()) if hasattr(target, "tell") else None
    except (OSError, ValueError):
        return None


def file_size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def read_peak_rss() -> int | None:
    try:
        with open("/proc/self/status", "rb") as fh:
            m = HWM.search(fh.read())
        return int(m.group(1)) * 1024 if m else None
    except OSError:
        return None
