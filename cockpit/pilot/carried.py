"""State a model carries from one call to the next: tensors kept on its modules that a forward pass changes.

A recurrent model trained with truncated backpropagation keeps its hidden state on a module (``self.hidden``)
between batches; a cache or a counter does the same. The same batch then gives another loss at every call,
which looks like randomness but is not: replaying the RNG does not reproduce it. Measured by comparing every
tensor held as a plain module attribute, and every buffer outside normalisation layers (whose running
statistics change by design in training mode), before and after a call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

NORMS = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm, nn.SyncBatchNorm)


def _tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for mname, module in model.named_modules():
        for attr, value in vars(module).items():
            items = list(enumerate(value)) if isinstance(value, (tuple, list)) and len(value) <= 8 else [(None, value)]
            for i, v in items:  # a tensor, or a short tuple of them (an LSTM's (h, c))
                if torch.is_tensor(v) and not isinstance(v, nn.Parameter):
                    out[f"{mname or type(model).__name__}.{attr}" + ("" if i is None else f"[{i}]")] = (
                        v.detach().clone()
                    )
        if not isinstance(module, NORMS):
            for bname, buf in module.named_buffers(recurse=False):
                if buf is not None and buf.dtype != torch.bool:
                    out[f"{mname or type(model).__name__}.{bname}"] = buf.detach().clone()
    return out


def changed_by(model: nn.Module, call: Callable[[], Any]) -> list[str]:
    """The module attributes and buffers (outside normalisation layers) that ``call`` created or changed."""
    before = _tensors(model)
    call()
    after = _tensors(model)
    return sorted(
        k
        for k, v in after.items()
        if k not in before or before[k].shape != v.shape or not torch.equal(before[k].to(v.device), v)
    )


def attached(model: nn.Module) -> list[str]:
    """The module attributes holding a tensor that is still part of an autograd graph (it has a ``grad_fn``):
    state kept from a forward pass without ``.detach()``, whose graph the next backward walks into. Each is named
    with the line of its class that assigns it, where the source can be read ('Recurrent.state, set at
    task.py:47')."""
    out = []
    for mname, module in model.named_modules():
        for attr, value in vars(module).items():
            items = list(enumerate(value)) if isinstance(value, (tuple, list)) and len(value) <= 8 else [(None, value)]
            for i, v in items:
                if torch.is_tensor(v) and not isinstance(v, nn.Parameter) and v.grad_fn is not None:
                    name = f"{mname or type(model).__name__}.{attr}" + ("" if i is None else f"[{i}]")
                    line = assigned_at(type(module), attr)
                    out.append(f"{name}, set at {line}" if line else name)
    return sorted(set(out))


def assigned_at(cls: type, attr: str) -> str:
    """The last line of ``cls``'s source that assigns ``self.<attr>`` (the forward's, after ``__init__``'s), or ""."""
    import inspect
    import re

    from .. import blame

    try:
        lines, first = inspect.getsourcelines(cls)
        file = inspect.getsourcefile(cls) or ""
    except (OSError, TypeError):
        return ""
    pattern = re.compile(rf"\bself\.{re.escape(attr)}\s*(=|\+=|\*=)(?!=)")
    found = [first + k for k, text in enumerate(lines) if pattern.search(text)]
    if not found or not file:
        return ""
    return f"{blame.shown(file)}:{found[-1]}"
