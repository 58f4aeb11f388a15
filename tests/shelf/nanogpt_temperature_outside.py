"""Broken twin of the nanoGPT task: a learnable temperature on the logits kept in the task's module, beside the
model, and added to the optimizer by hand. It trains, but gradient clipping over the model's parameters
(``[training] grad_clip``) never reaches it, and no checkpoint of the model holds it."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from tests.shelf import nanogpt_task as base

TEMPERATURE = torch.nn.Parameter(torch.ones(()))


def loss(model: Any, batch: dict[str, Any]) -> torch.Tensor:
    logits, _ = model(batch["input_ids"], batch["labels"])
    logits = logits / TEMPERATURE.to(logits.device)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch["labels"].reshape(-1), ignore_index=-1)


def optimizer(model: Any, params: dict[str, Any]) -> torch.optim.Optimizer:
    opt = base.optimizer(model, params)
    opt.add_param_group({"params": [TEMPERATURE], "weight_decay": 0.0})
    return opt


task = dataclasses.replace(base.task, loss=loss, optimizer=optimizer, name="")
