"""What the task declares beside its data, checked against what its code gives (the data gate): a key it names
for a mask must be one the collate writes, and the examples it gives the export to replay must be examples the
collate takes. Each mistake here was found only at the end of the pilot, or never."""

from __future__ import annotations

from typing import Any

from ... import blame
from ..context import Context
from ..datascan import collate
from ..gate import Gate
from ..returned import control_examples
from ..usercode import UserCodeError

KEYS = "the task's keys are in the batch"


def keys(g: Gate, task: Any, batch: dict[str, Any]) -> None:
    """A key the task names for a mask of the positions that count (``loss_mask_key``, no default) must be one the
    collate writes: else every check that reads it (instructions counted as targets) is skipped in silence."""
    key = task.loss_mask_key
    if not key:
        return
    if key in batch:
        g.check(KEYS, True, f"loss_mask_key {key!r} is in the batch")
        return
    g.check(
        KEYS,
        False,
        f"Task.loss_mask_key is {key!r}, but the batch {blame.defined_at(task.collate)} returns has no such key "
        f"(its keys: {', '.join(sorted(map(str, batch)))}): name the key the collate writes the mask of the "
        "positions that count under, or leave loss_mask_key out",
    )


CONTROLS = "control inputs collate"


def controls(ctx: Context, g: Gate) -> None:
    """The examples ``control_inputs`` gives the export to replay, checked and collated now: a mistake there
    (splits instead of examples, an empty list) failed at the last phase, after the whole pilot, blamed on the
    collate."""
    task = ctx.the_task
    if task.control_inputs is None:
        return
    controls = control_examples(task, ctx.params, ctx.trainer.splits)
    try:
        collate(task, ctx.params, controls)
    except UserCodeError as exc:
        g.check(
            CONTROLS,
            False,
            f"the {len(controls)} examples {blame.defined_at(task.control_inputs)} returns for the replay after "
            f"export do not collate: {exc}; return examples shaped like the datasets'",
        )
        return
    g.check(CONTROLS, True, f"{len(controls)} examples from {blame.defined_at(task.control_inputs)}")
