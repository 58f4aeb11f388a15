"""The Task contract: what a user writes to put an existing model and dataset under Cockpit.

A task is one small Python file exposing a :class:`Task` (or a function
returning one), referenced from ``campaign.toml`` as ``package.module:attr`` or
``path/to/file.py:attr``. Cockpit calls only what is declared here:

``build_model(params) -> torch.nn.Module``
    The model for a variant's effective parameters (flat dict: task params,
    batch and training settings with the variant's overrides applied).
``datasets(params) -> {"train": [...], "val": [...], "test": [...]}``
    Sequences of examples. Every example is a dict with at least ``"id"``
    (unique across all splits) and ``"group"`` (the leakage unit: the
    conversation, patient, source document or period it comes from); for a
    ``group_unit`` of ``"period"`` the group is sortable (an ISO date, a year).
``collate(examples, params) -> dict``
    One batch: tensors plus ``"ids"`` (the examples' ids, in order). Cropping
    to the maximum length happens here, as in training.
``loss(model, batch) -> Tensor | (sum, count)``
    Either the mean loss of the batch, or the *sum* of per-item losses and the
    number of items that count (tokens, examples). With ``(sum, count)``
    Cockpit normalises over the whole accumulated update, which is what a
    single large batch would give; a mean per microbatch is divided by the
    accumulation count, which is exact only when every microbatch has the
    same number of counted items (the accumulation gate checks this).

Optional:

``kind``            "generation", "classification" or "other" (which data checks apply)
``label_names``     list of class names; the target id is the index
``label_key``       batch key holding the targets (default "labels")
``ignore_index``    target value that does not count (default -100)
``input_key``       batch key holding the model input ids (default "input_ids")
``mask_key``        batch key holding the attention mask (default "attention_mask")
``loss_mask_key``   batch key of a 0/1 mask of positions meant to count (generation: the answer span)
``instruction_is_input``  generation: the instruction must not contribute to the loss
``max_length(params)``    the cropping length the collate function applies
``length(example)``       an example's length before cropping (for the worst case)
``vocab_size(params)``    for the uniform-prediction initial loss (generation)
``decode(batch, row)``    readable text of one batch row (a str, or a list of (text, supervised: bool) spans)
``predict(model, batch)`` predictions per row, comparable to the targets (overfit gate)
``trainable(model)``      names of parameters meant to train; the others are frozen
``control_inputs(params)`` examples to replay after export (default: the first validation examples)
``group_unit``      the leakage unit, in words (default "group")
``batch_statistics`` True when the model uses batch statistics (BatchNorm): accumulated
                    and single-batch gradients then differ legitimately
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("generation", "classification", "other")


class TaskError(Exception):
    """The task reference or the Task object itself is unusable (not an error inside user code)."""


@dataclass
class Task:
    build_model: Callable[[dict[str, Any]], Any]
    datasets: Callable[[dict[str, Any]], Mapping[str, Sequence[Any]]]
    collate: Callable[[list[dict[str, Any]], dict[str, Any]], dict[str, Any]]
    loss: Callable[[Any, dict[str, Any]], Any]
    kind: str = "other"
    label_names: list[str] | None = None
    label_key: str = "labels"
    ignore_index: int = -100
    input_key: str = "input_ids"
    mask_key: str = "attention_mask"
    loss_mask_key: str | None = None
    instruction_is_input: bool = False
    max_length: Callable[[dict[str, Any]], int] | None = None
    length: Callable[[dict[str, Any]], int] | None = None
    vocab_size: Callable[[dict[str, Any]], int] | None = None
    decode: Callable[[dict[str, Any], int], Any] | None = None
    predict: Callable[[Any, dict[str, Any]], Any] | None = None
    trainable: Callable[[Any], Sequence[str]] | None = None
    control_inputs: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None
    group_unit: str = "group"
    batch_statistics: bool = False
    name: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for req in ("build_model", "datasets", "collate", "loss"):
            if not callable(getattr(self, req)):
                raise TaskError(f"Task.{req} must be callable, got {type(getattr(self, req)).__name__}")
        if self.kind not in KINDS:
            raise TaskError(f"Task.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.label_names is not None:
            self.label_names = list(self.label_names)


def load_task(entry: str, base: Path | None = None) -> Task:
    """Resolve ``module:attr`` or ``path/to/file.py:attr`` to a Task.

    ``attr`` may be a Task or a zero-argument callable returning one. Paths are
    relative to ``base`` (the campaign folder) or the current directory.
    """
    if ":" not in entry:
        raise TaskError(
            f"task entry {entry!r} must be 'package.module:attribute' or 'path/to/file.py:attribute' "
            "(set [task] entry in campaign.toml)"
        )
    where, _, attr = entry.rpartition(":")
    if where.endswith(".py"):
        candidates = [Path(where)] if Path(where).is_absolute() else [Path(base or ".") / where, Path(where)]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise TaskError(f"task file {where!r} not found (looked in {', '.join(str(c) for c in candidates)})")
        name = f"cockpit_task_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)  # errors here are the user's: the caller records the traceback
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name and where.startswith(exc.name):
                raise TaskError(
                    f"task module {where!r} cannot be imported ({exc}); is it on PYTHONPATH, "
                    "or did you mean a file path ending in .py?"
                ) from exc
            raise
    if not hasattr(module, attr):
        public = [n for n in dir(module) if not n.startswith("_")]
        raise TaskError(f"task module {where!r} has no attribute {attr!r} (it has: {', '.join(public[:12])})")
    obj = getattr(module, attr)
    if not isinstance(obj, Task) and callable(obj):
        obj = obj()
    if not isinstance(obj, Task):
        raise TaskError(f"{entry} is a {type(obj).__name__}, not a cockpit.pilot.task.Task")
    obj.name = obj.name or entry
    return obj
