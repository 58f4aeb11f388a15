"""The Task contract: what a user writes to put an existing model and dataset under Cockpit.

A task is one small Python file exposing a :class:`Task` (or a function
returning one), referenced from ``campaign.toml`` as ``package.module:attr`` or
``path/to/file.py:attr``. Cockpit pilots the user's code *as written*: the
model as ``build_model`` returns it (what requires grad trains), the user's
optimizer and scheduler when given, the loss as the user computes it, the
labels as the collate makes them. Cockpit's own parts are the loop (the order
of microbatches, accumulation, the optimizer step, the schedule's step,
precision through autocast, gradient clipping) and the measurements around it;
where a campaign setting needs a hook the code does not have, the pilot says
the setting had no effect instead of passing it.

``build_model(params) -> torch.nn.Module``
    The model for a variant's effective parameters (flat dict: task params,
    batch and training settings with the variant's overrides applied). The
    parameters that still require grad after it returns are the ones that train.
``datasets(params) -> {"train": ..., "val": ..., "test": ...}``
    Indexable sequences of examples (lists, Hugging Face ``datasets.Dataset``,
    anything with ``len`` and ``[i]``). An example is a dict; ``"id"`` (unique
    across splits) names it in every message (without ids, examples are named
    by split and position) and ``"group"`` is the leakage unit (the
    conversation, patient, source document or period it comes from; without
    groups, each example is its own). For a ``group_unit`` of ``"period"`` the
    group is sortable (an ISO date, a year).
``collate(examples, params) -> dict``
    One batch: tensors, and optionally ``"ids"`` (the examples' ids, in order;
    Cockpit adds them when the collate does not). Cropping to the maximum
    length happens here, as in training.
``loss(model, batch)``
    What the user's training step computes, in any of these forms: the mean
    loss (a scalar tensor); ``(sum, count)``, the sum of per-item losses and
    the number of items that count (with it Cockpit normalises over the whole
    accumulated update, which is what one large batch would give); a model
    output with ``.loss`` (Hugging Face) or a dict with ``"loss"``; ``(logits, loss)``
    (nanoGPT); or ``(loss, terms)``. Named scalar terms beside the total (a dict's
    other entries, ``terms``, a model output's ``aux_loss``) are read one by one at
    init and after the overfit.
    Left out, the model is called with the batch's tensors as keywords and its
    ``.loss`` is used (Hugging Face models given ``labels``).

Optional:

``kind``            "generation", "classification" or "other" (which data checks apply)
``label_names``     list of class names; the target id is the index
``label_key``       batch key holding the targets (default "labels")
``ignore_index``    target value that does not count (default -100; nanoGPT uses -1)
``label_convention`` generation: ``"aligned"`` when the label at a position is the target of that
                    position's output (nanoGPT's ``y = x`` shifted by one, classification), or
                    ``"shift_in_loss"`` when labels equal the inputs and the loss shifts them
                    (Hugging Face causal LMs). Used by the leakage, overfit, prediction and
                    alignment checks and by ``cockpit inspect``.
``causal``          generation: the model is a decoder whose output at a position never depends on
                    later tokens (default: True for generation); checked by the pilot
``input_key``       batch key holding the model input ids (default "input_ids")
``mask_key``        batch key holding the attention mask (default "attention_mask")
``loss_mask_key``   batch key of a 0/1 mask of positions meant to count (generation: the answer span)
``instruction_is_input``  generation: the instruction must not contribute to the loss
``max_length(params)``    the cropping length the collate function applies
``length(example)``       an example's length before cropping (for the worst case)
``vocab_size(params)``    for the uniform-prediction initial loss (generation)
``decode(batch, row)``    readable text of one batch row (a str, or a list of (text, supervised: bool) spans)
``predict(model, batch)`` predictions per row, comparable to the targets; without it Cockpit takes
                    the argmax of the model's logits, aligned by ``label_convention``
``generate(model, batch)`` generation: the text the model generates from each row's prompt (free-running,
                    greedy: a list of str, one per row); recorded in the validation predictions,
                    the inspected examples and the replay of the control inputs
``trainable(model)``      names of the parameters meant to train: *checked* against what requires
                    grad after ``build_model``, never forced (a disagreement fails the backward gate)
``optimizer(model, params)``  the user's optimizer (parameter groups, betas, ...); default: Cockpit's
                    built-in one from ``[training]`` over the parameters that require grad
``scheduler(optimizer, params)``  the user's learning-rate scheduler, stepped once per update;
                    default: Cockpit's from ``[training] schedule`` and ``warmup_updates``
``checkpointing(model, on)``  turns activation checkpointing on or off when the model has no
                    ``gradient_checkpointing_enable()`` (Hugging Face) of its own
``control_inputs(params)`` examples to replay after export (default: the first validation examples)
``group_unit``      the leakage unit, in words (default "group")
``batch_statistics`` True when the model uses batch statistics that BatchNorm layers do not show: the data
                    gate's "examples independent" then expects one example's outputs to move with the others'
``batch_level_loss`` True when the loss has a term over the whole batch (in-batch negatives of a contrastive
                    loss, a router's load-balancing loss): it does not decompose over examples, so an
                    accumulated update optimises another objective than one big batch. A hint: the accumulation
                    gate measures it and reports the size; declared, the difference is expected (a pass with
                    that note), undeclared and unnamed by the model's output, a warning
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from ..contract import Batch, Example, Params

KINDS = ("generation", "classification", "other")
CONVENTIONS = ("aligned", "shift_in_loss")


class TaskError(Exception):
    """The task reference or the Task object itself is unusable (not an error inside user code)."""


class DataTooSmall(TaskError):
    """A split the campaign needs is empty, or smaller than one update: the user's data or batch settings, not Cockpit.

    ``remedy`` says what to change."""

    remedy = (
        "give the split more examples, or lower [batch] microbatch or accumulation (one update takes "
        "microbatch x accumulation x ranks examples); `cockpit check` sizes the splits before a run"
    )


class TaskExtras(TypedDict, total=False):
    """``Task.extras``: the optional hooks the pilot's phases read (docs/pilot.md), each with its default there."""

    label_field: str  # example field holding the label *name* (default "label")
    label_names_by_split: Mapping[str, Sequence[str]] | Callable[[Params], Mapping[str, Sequence[str]]]
    inspect_examples: tuple[int, int]  # (train, val) examples inspect.json records (default (4, 2))
    max_no_target_share: float  # share of training examples allowed no supervised token (default 0)
    scan_seconds: float  # time budget for collating the splits in the data gate (default 30 s)
    measure_targets: bool  # False skips the alignment probe (default True)
    ordered_groups: bool  # the group is a period: validation and test come after training
    overfit_lr: float  # the overfit gate's learning rate (default [pilot] overfit_lr, else the campaign's)


@dataclass
class Task:
    build_model: Callable[[Params], Any]
    datasets: Callable[[Params], Mapping[str, Sequence[Mapping[str, object]]]]  # each split: its examples
    collate: Callable[[list[Example], Params], Batch]
    loss: Callable[[Any, Batch], Any] | None = None
    kind: str = "other"
    label_names: list[str] | None = None
    label_key: str = "labels"
    ignore_index: int = -100
    label_convention: str = "aligned"
    causal: bool | None = None
    input_key: str = "input_ids"
    mask_key: str = "attention_mask"
    loss_mask_key: str | None = None
    instruction_is_input: bool = False
    max_length: Callable[[Params], int] | None = None
    length: Callable[[Example], int] | None = None
    vocab_size: Callable[[Params], int] | None = None
    decode: Callable[[Batch, int], Any] | None = None
    predict: Callable[[Any, Batch], Any] | None = None
    generate: Callable[[Any, Batch], list[str]] | None = None
    trainable: Callable[[Any], Sequence[str]] | None = None
    optimizer: Callable[[Any, Params], Any] | None = None
    scheduler: Callable[[Any, Params], Any] | None = None
    checkpointing: Callable[[Any, bool], Any] | None = None
    control_inputs: Callable[[Params], list[Example]] | None = None
    group_unit: str = "group"
    batch_statistics: bool = False
    batch_level_loss: bool = False
    name: str = ""
    extras: TaskExtras = field(default_factory=TaskExtras)

    def __post_init__(self) -> None:
        for req in ("build_model", "datasets", "collate"):
            if not callable(getattr(self, req)):
                raise TaskError(f"Task.{req} must be callable, got {type(getattr(self, req)).__name__}")
        for opt in (
            "loss",
            "optimizer",
            "scheduler",
            "checkpointing",
            "trainable",
            "predict",
            "decode",
            "generate",
        ):
            if getattr(self, opt) is not None and not callable(getattr(self, opt)):
                raise TaskError(f"Task.{opt} must be callable or left out, got {type(getattr(self, opt)).__name__}")
        if self.kind not in KINDS:
            raise TaskError(f"Task.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.label_convention not in CONVENTIONS:
            raise TaskError(
                f"Task.label_convention must be one of {', '.join(CONVENTIONS)}, got {self.label_convention!r}: "
                "'aligned' when labels[t] is the target of the output at t (nanoGPT, classification), "
                "'shift_in_loss' when labels equal the inputs and the loss shifts them (Hugging Face)"
            )
        if isinstance(self.ignore_index, bool) or not isinstance(self.ignore_index, int):
            raise TaskError(
                f"Task.ignore_index must be an int (the label the loss skips, -100 by default), got "
                f"{self.ignore_index!r}"
            )
        for key in ("group_unit", "input_key", "mask_key", "label_key", "name"):
            if not isinstance(getattr(self, key), str):
                raise TaskError(f"Task.{key} must be a string, got {getattr(self, key)!r}")
        if self.loss_mask_key is not None and not isinstance(self.loss_mask_key, str):
            raise TaskError(f"Task.loss_mask_key must be a string or left out, got {self.loss_mask_key!r}")
        if self.causal is None:
            self.causal = self.kind == "generation"
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
        folder = str(path.resolve().parent)
        if folder not in sys.path:  # the task file imports the modules beside it, as `python task.py` would
            sys.path.insert(0, folder)
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
