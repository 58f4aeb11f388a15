"""Broken twin of the ResNet task: a learnable temperature on the logits kept beside the model, in the task's
module, and added to the optimizer by hand; ``[training] grad_clip`` clips the model's parameters only."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from tests.shelf import resnet_task as base

TEMPERATURE = torch.nn.Parameter(torch.ones(()))


def loss(model: Any, batch: dict[str, Any]) -> torch.Tensor:
    logits = model(pixel_values=batch["pixel_values"]).logits / TEMPERATURE.to(batch["pixel_values"].device)
    return F.cross_entropy(logits, batch["labels"])


def optimizer(model: Any, params: dict[str, Any]) -> torch.optim.Optimizer:
    return torch.optim.AdamW([*model.parameters(), TEMPERATURE], lr=float(params["lr"]))


task = dataclasses.replace(base.task, loss=loss, optimizer=optimizer, name="")
