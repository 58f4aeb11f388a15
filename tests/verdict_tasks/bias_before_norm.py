"""A convolution with a bias right before a BatchNorm, trained with plain SGD (the classic CIFAR ResNet written with
``bias=True``): the norm's mean subtraction cancels the bias, so its gradient is at rounding level and SGD leaves it
unchanged. Healthy: the bias is redundant, not broken."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cockpit.pilot.task import Task
from tests.verdict_tasks.common import FEATURES, data


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["x"] for e in examples])
    return {"x": x.unsqueeze(1), "labels": torch.tensor([e["y"] for e in examples])}


def build(params: dict[str, Any]) -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(1, 8, 3, padding=1),  # bias=True, then a BatchNorm: the bias is cancelled
        nn.BatchNorm1d(8),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * FEATURES, 3),
    )


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return nn.functional.cross_entropy(model(batch["x"]), batch["labels"])


task = Task(build_model=build, datasets=data, collate=collate, loss=loss, input_key="x", mask_key="none")
