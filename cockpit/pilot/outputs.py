"""What the user's loss and model give back, read the way the user's own training step reads it.

The task's ``loss(model, batch)`` may return the mean loss, ``(sum, count)``, a
Hugging Face model output with ``.loss`` (or a dict with ``"loss"``), nanoGPT's
``(logits, loss)`` or ``(loss, terms)``, terms a dict of named scalars (their
other scalars, and a model output's ``aux_loss``, are the loss's named terms);
without a ``loss`` the model is called with the batch's tensors and its
``.loss`` is used. The model's *outputs* (its logits) are captured by a forward
hook on the model itself, whatever the loss function does with them, so
the semantic checks and the default predictions see exactly what the loss saw.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..contract import Batch
from .task import Task
from .usercode import UserCodeError


@dataclass
class LossOut:
    value: torch.Tensor  # a mean when count is None, else a sum over ``count`` items
    count: torch.Tensor | None
    form: str  # "mean", "sum/count", "model output .loss", "(logits, loss)", "(loss, terms)"
    # named terms the loss or the model's output exposes beside the total (a dict's other scalars, a Hugging Face
    # output's aux_loss, the mapping of a returned (loss, terms)): each a scalar, as given (not weighted)
    terms: dict[str, torch.Tensor] = field(default_factory=dict)


def model_inputs(batch: Batch) -> dict[str, torch.Tensor]:
    """The batch's tensors, as keywords for a model that takes them (Hugging Face)."""
    return {k: v for k, v in batch.items() if torch.is_tensor(v)}


def default_loss(model: Any, batch: Batch) -> Any:
    """No ``Task.loss``: call the model with the batch's tensors and use its own loss."""
    return model(**model_inputs(batch))


def read_loss(out: Any, device: torch.device) -> LossOut:
    """Turn whatever the loss function returned into (value, count)."""
    if torch.is_tensor(out):
        return LossOut(out, None, "mean")
    loss = _attr_loss(out)
    if loss is not _MISSING:
        if not torch.is_tensor(loss):
            raise UserCodeError(
                "loss",
                ValueError(
                    "the model's output has no loss (.loss is None): give the model its labels, or compute the loss "
                    "in Task.loss"
                ),
            )
        return LossOut(loss, None, "model output .loss", terms_of(out))
    if isinstance(out, (tuple, list)) and len(out) == 2:
        a, b = out
        if torch.is_tensor(a) and a.dim() == 0 and isinstance(b, Mapping):
            terms = terms_of(b)
            if terms or not b:
                return LossOut(a, None, "(loss, terms)", terms)
        if torch.is_tensor(a) and a.dim() >= 1 and (b is None or (torch.is_tensor(b) and b.dim() == 0)):
            if b is None:
                raise UserCodeError(
                    "loss", ValueError("returned (logits, None): the model computes its loss only when given targets")
                )
            return LossOut(b, None, "(logits, loss)")
        if torch.is_tensor(a) and a.dim() == 0:
            return LossOut(a, _count(b, device), "sum/count")
    raise UserCodeError(
        "loss",
        TypeError(
            f"returned {type(out).__name__}: return the mean loss (a tensor), (sum, count), a model output with "
            ".loss, or (logits, loss)"
        ),
    )


_MISSING = object()


def _count(b: Any, device: torch.device | str | None) -> torch.Tensor:
    """The count of ``(sum, count)``: one real number; anything else is the task's mistake, said as such."""
    number = isinstance(b, (int, float)) and not isinstance(b, bool)
    one = torch.is_tensor(b) and b.numel() == 1 and not b.dtype.is_complex and b.dtype != torch.bool
    if not (number or one or (type(b).__module__ == "numpy" and getattr(b, "size", 0) == 1)):
        said = f"a tensor of shape {tuple(b.shape)}" if torch.is_tensor(b) else f"a {type(b).__name__}"
        raise UserCodeError(
            "loss",
            TypeError(
                f"returned (loss, {said}): the second element of (sum, count) must be one number, the count the sum "
                "is divided by. To return the logits with the loss, put them first: (logits, loss); named terms "
                "go in a dict of scalar tensors: (loss, {'aux': aux})"
            ),
        )
    return torch.as_tensor(b, dtype=torch.float32, device=device).detach().reshape(())


def terms_of(out: Any) -> dict[str, torch.Tensor]:
    """The named scalar terms beside ``loss`` in a mapping (a dict, a Hugging Face output: ``aux_loss``), or on
    an output's attributes named like a loss (``aux_loss``, ``router_aux_loss``)."""
    if isinstance(out, Mapping):
        items = [(k, v) for k, v in out.items() if isinstance(k, str)]
    else:
        items = [(k, v) for k, v in getattr(out, "__dict__", {}).items() if k.endswith("_loss")]
    return {k: v for k, v in items if k != "loss" and torch.is_tensor(v) and v.dim() == 0 and v.is_floating_point()}


def _attr_loss(out: Any) -> Any:
    if isinstance(out, Mapping):
        return out.get("loss", _MISSING) if "loss" in out else _MISSING
    if hasattr(out, "loss") and not isinstance(out, (tuple, list)):
        return out.loss
    return _MISSING


def logits_of(out: Any) -> torch.Tensor | None:
    """The logits in a model's output: a tensor, ``.logits``, or the first tensor of a tuple."""
    if torch.is_tensor(out):
        return out
    if isinstance(out, Mapping):
        named = out.get("logits")
        if torch.is_tensor(named):
            return named
    lg = getattr(out, "logits", None)
    if torch.is_tensor(lg):
        return lg
    if isinstance(out, (tuple, list)):
        for x in out:
            if torch.is_tensor(x) and x.dim() >= 2:
                return x
    return None


class Capture:
    """The outputs of every call of a module's forward while active (a hook on the module itself)."""

    def __init__(self) -> None:
        self.outputs: list[Any] = []

    @property
    def terms(self) -> dict[str, torch.Tensor]:
        """The named loss terms of the last output that has some (a Hugging Face output's ``aux_loss``)."""
        for out in reversed(self.outputs):
            if isinstance(out, (tuple, list)) or torch.is_tensor(out):
                continue
            found = terms_of(out)
            if found:
                return found
        return {}

    @property
    def logits(self) -> torch.Tensor | None:
        for out in reversed(self.outputs):
            lg = logits_of(out)
            if lg is not None:
                return lg
        return None


@contextlib.contextmanager
def capture(model: torch.nn.Module) -> Iterator[Capture]:
    cap = Capture()

    def hook(module: Any, args: Any, output: Any) -> None:
        cap.outputs.append(output)

    handle = model.register_forward_hook(hook)
    try:
        yield cap
    finally:
        handle.remove()


def aligned_predictions(task: Task, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
    """Argmax predictions laid out like the labels, by the task's label convention; None if they do not fit.

    ``aligned``: the output at position t predicts ``labels[t]``. ``shift_in_loss``:
    the output at t predicts ``labels[t + 1]`` (the loss shifts), so position 0
    has no prediction and is marked with the ignore index.
    """
    if logits.dim() == labels.dim() + 1 and tuple(logits.shape[:-1]) == tuple(labels.shape):
        pred = logits.argmax(-1)
    elif logits.dim() == 2 and labels.dim() == 1 and logits.shape[0] == labels.shape[0]:
        return logits.argmax(-1)
    else:
        return None
    if task.label_convention == "shift_in_loss" and pred.dim() == 2:
        shifted = torch.full_like(pred, task.ignore_index)
        shifted[:, 1:] = pred[:, :-1]
        return shifted
    return pred


def target_positions(task: Task, labels: torch.Tensor, inputs: torch.Tensor | None) -> torch.Tensor | None:
    """Which input tokens are targets (bool, shaped like the inputs), by the label convention."""
    if inputs is None or tuple(inputs.shape) != tuple(labels.shape) or labels.dim() != 2:
        return None
    sup = labels != task.ignore_index
    if task.label_convention == "shift_in_loss":
        return sup  # labels[t] is input token t, predicted by position t - 1
    tgt = torch.zeros_like(sup)
    tgt[:, 1:] = sup[:, :-1]  # labels[t - 1] is input token t
    return tgt
