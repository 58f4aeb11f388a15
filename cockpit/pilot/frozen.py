"""What froze a model: the words for a model in which no parameter requires grad.

Cockpit trains what requires grad after ``build_model`` (the user's code decides); when nothing does, there is
nothing to train and no optimizer can be built. The usual causes are a freeze meant for one part that reached
the whole model: a reference or teacher made with ``copy.copy`` (or assigned) shares its parameter tensors with
the policy, so freezing it froze both; a PEFT model loaded with ``is_trainable=False``; a ``requires_grad_(False)``
on the root. The words name the top-level modules that are frozen and the sharing that froze them.
"""

from __future__ import annotations

from typing import Any

import torch


class NothingTrains(Exception):
    """No parameter of the model requires grad (raised where training cannot go on without one)."""


def describe(model: torch.nn.Module) -> str:
    """Why nothing trains: the frozen top-level modules (with their sizes) and the ones sharing parameters."""
    owner: dict[int, str] = {}  # id(parameter) -> the first top-level module that holds it
    parts: list[str] = []
    children = list(model.named_children())
    for name, child in children:
        ps = list(child.parameters())
        if not ps:
            continue
        shared = sorted({owner[id(p)] for p in ps if id(p) in owner})
        for p in ps:
            owner.setdefault(id(p), name)
        size = sum(p.numel() for p in ps)
        if shared:
            parts.append(
                f"{name} (shares its parameter tensors with {', '.join(shared)}: made by copy.copy or an assignment, "
                "not copy.deepcopy, so freezing one froze both)"
            )
        else:
            parts.append(f"{name} ({size:,} parameters, requires_grad False)")
    own = [n for n, _ in model.named_parameters(recurse=False)]
    if own:
        parts.append(f"the root's own {', '.join(own[:4])}")
    total = sum(p.numel() for p in model.parameters())
    if not total:
        return f"the model ({type(model).__name__}) has no parameters at all"
    shares = any("shares its parameter tensors" in p for p in parts)
    where = "; ".join(parts[:8]) + (f"; and {len(parts) - 8} more" if len(parts) > 8 else "")
    peft = _peft_words(model)
    return (
        f"no parameter requires grad after build_model, so nothing would train ({total:,} parameters, all frozen"
        + (f"; top-level modules: {where}" if where else "")
        + ")"
        + (f"; {peft}" if peft else "")
        + ". Unfreeze what should train in build_model (requires_grad_(True))"
        + ("; load the adapter with is_trainable=True to train it" if peft else "")
        + ("; a frozen reference or teacher must be a separate copy (copy.deepcopy)" if shares else "")
    )


def _peft_words(model: Any) -> str:
    """A PEFT model whose adapter is frozen too: it was loaded for inference."""
    if type(model).__module__.startswith("peft") and getattr(model, "peft_config", None):
        return "a PEFT model with its adapter frozen (PeftModel.from_pretrained(..., is_trainable=False) loads it for inference)"
    return ""
