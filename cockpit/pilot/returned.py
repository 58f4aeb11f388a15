"""What the task's functions return, checked where the trainer takes it: a value Cockpit cannot use is the task's
mistake, said in one paragraph naming the function (exit 5), never a crash deeper in Cockpit (exit 6).

Each check says what was returned and what to return instead: a model TorchScript made (Cockpit hooks the
forward), an optimizer that only looks like one under Cockpit's own schedule, a scheduler that steps on a metric
or cannot be saved, trainable parameters given as tensors or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .usercode import UserCodeError, user


def model(value: Any) -> torch.nn.Module:
    if not isinstance(value, torch.nn.Module):
        raise UserCodeError("build_model", TypeError(f"returned a {type(value).__name__}, not a torch.nn.Module"))
    if isinstance(value, torch.jit.ScriptModule):
        raise UserCodeError(
            "build_model",
            TypeError(
                f"returned a TorchScript module ({type(value).__name__}, from torch.jit.script or trace): Cockpit "
                "measures the model through hooks on its forward, which TorchScript refuses; return the nn.Module "
                "and script it for export"
            ),
        )
    return value


def optimizer(value: Any, own_schedule: bool) -> Any:
    if not (hasattr(value, "param_groups") and callable(getattr(value, "step", None))):
        raise UserCodeError("optimizer", TypeError(f"returned a {type(value).__name__}, not a torch optimizer"))
    if own_schedule and not isinstance(value, torch.optim.Optimizer):
        raise UserCodeError(
            "optimizer",
            TypeError(
                f"returned a {type(value).__name__}, which is not a torch.optim.Optimizer, and the task gives no "
                "scheduler: Cockpit's schedule (LambdaLR) steps only a torch.optim.Optimizer. Subclass it, or give "
                "Task.scheduler as well"
            ),
        )
    return value


def scheduler(value: Any) -> Any:
    name = type(value).__name__
    if not callable(getattr(value, "step", None)):
        raise UserCodeError("scheduler", TypeError(f"returned a {name}, not a scheduler"))
    if isinstance(value, torch.optim.Optimizer):
        raise UserCodeError(
            "scheduler",
            TypeError(
                f"returned the optimizer ({name}), not a scheduler: stepping it as the schedule would take a second "
                "optimizer step every update. Return a learning-rate scheduler built over it, or leave "
                "Task.scheduler out"
            ),
        )
    if isinstance(value, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise UserCodeError(
            "scheduler",
            TypeError(
                "returned ReduceLROnPlateau, which steps on a validation metric (scheduler.step(val_loss)); Cockpit "
                "steps the schedule once per update, without one. Give a schedule over updates (LambdaLR, a cosine "
                "schedule with warm-up), or leave Task.scheduler out for [training] schedule"
            ),
        )
    if not (callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))):
        raise UserCodeError(
            "scheduler",
            TypeError(
                f"returned a {name} without state_dict() and load_state_dict(): a checkpoint could not keep the "
                "schedule's position, and a resumed run would start it again. Add both (a torch LRScheduler has "
                "them)"
            ),
        )
    return value


def names(value: Any) -> set[str]:
    """``Task.trainable(model)``: the names of the parameters that train."""
    items = list(value) if isinstance(value, Iterable) and not isinstance(value, (str, bytes)) else None
    if items is None or not all(isinstance(n, str) for n in items):
        got = (
            f"a {type(value).__name__}"
            if items is None
            else f"{type(next(n for n in items if not isinstance(n, str))).__name__} items"
        )
        raise UserCodeError(
            "trainable",
            TypeError(
                f"returned {got}: it must return the names of the parameters that train, as "
                "model.named_parameters() names them ([n for n, p in model.named_parameters() if ...])"
            ),
        )
    return set(items)


def controls(value: Any, example: Any) -> list[Any]:
    """What ``control_inputs`` returned: a non-empty list of examples like the datasets' (``example``, one of the
    training split's), which the export collates and replays. Anything else failed deep in the collate at the last
    phase, blamed on the collate."""
    kind = type(example).__name__
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        what = (
            f"a dict (keys {', '.join(map(str, list(value)[:4]))})" if isinstance(value, dict) else type(value).__name__
        )
        raise UserCodeError(
            "control_inputs",
            TypeError(
                f"returned {what}, not a list of examples: return the examples to replay after export, shaped like "
                f"the datasets' ({kind}), e.g. datasets(params)['val'][:4]"
            ),
        )
    if not value:
        raise UserCodeError(
            "control_inputs",
            ValueError(
                "returned no example: the replay after export needs at least one; leave it out to replay "
                "the first validation examples"
            ),
        )
    odd = [i for i, e in enumerate(value) if isinstance(example, dict) and not isinstance(e, dict)]
    if odd:
        raise UserCodeError(
            "control_inputs",
            TypeError(
                f"returned {type(value[odd[0]]).__name__} at [{odd[0]}] where the datasets' examples are "
                f"{kind}s: return examples shaped like the datasets', which the collate takes"
            ),
        )
    return list(value)


def control_examples(task: Any, params: Any, splits: Any) -> list[Any]:
    """The examples the export replays: ``control_inputs``' (checked), else the first validation examples."""
    val = splits["val"]
    if task.control_inputs is None:
        return [val[i] for i in range(min(4, len(val)))]
    train = splits.get("train") or val
    return controls(user("control_inputs", task.control_inputs, params), train[0] if len(train) else {})
