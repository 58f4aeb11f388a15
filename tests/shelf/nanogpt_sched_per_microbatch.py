"""Broken twin of the nanoGPT task: nanoGPT's warm-up and cosine schedule handed as ``Task.scheduler``, and also
stepped in the loss after every training batch, as the user's own loop stepped it once per batch. Cockpit steps it
once per update as well, so at accumulation 2 the schedule runs three times faster than the run."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from tests.shelf import nanogpt_task as base

STEPPED: list[Any] = []  # the scheduler the loss steps: the last one built for a model's optimizer


def scheduler(optimizer: torch.optim.Optimizer, params: dict[str, Any]) -> Any:
    warmup, total = 20, int(params.get("updates") or 200)

    def factor(step: int) -> float:  # nanoGPT's get_lr, as a fraction of the peak rate (min_lr = lr / 10)
        if step < warmup:
            return (step + 1) / (warmup + 1)
        ratio = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * ratio))

    sched = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    STEPPED[:] = [sched]
    return sched


def loss(model: Any, batch: dict[str, Any]) -> Any:
    out = base.loss(model, batch)
    if model.training:
        for sched in STEPPED:
            sched.step()  # per batch, as the training loop this came from did
    return out


task = dataclasses.replace(base.task, loss=loss, scheduler=scheduler, name="")
