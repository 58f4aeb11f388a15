"""Broken twin of the ResNet task: a linear warm-up and decay handed as ``Task.scheduler`` (the Hugging Face
``get_linear_schedule_with_warmup``), and also stepped in the loss after every training batch, as the user's own
loop did. With Cockpit's step after each update it advances twice per update."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from transformers import get_linear_schedule_with_warmup

from tests.shelf import resnet_task as base

STEPPED: list[Any] = []


def scheduler(optimizer: torch.optim.Optimizer, params: dict[str, Any]) -> Any:
    sched = get_linear_schedule_with_warmup(optimizer, 10, int(params.get("updates") or 200))
    STEPPED[:] = [sched]
    return sched


def loss(model: Any, batch: dict[str, Any]) -> Any:
    out = base.loss(model, batch)
    if model.training:
        for sched in STEPPED:
            sched.step()
    return out


task = dataclasses.replace(base.task, loss=loss, scheduler=scheduler, name="")
