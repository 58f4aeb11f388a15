"""A tabular regression model (an MLP fitting a real-valued target with MSE): float targets, no classes."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.verdict_tasks.common import FEATURES, data


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["x"] for e in examples])
    return {"x": x, "labels": x[:, 0] * x[:, 1] + x[:, 2]}


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return F.mse_loss(model(batch["x"]).squeeze(-1), batch["labels"])


task = Task(
    build_model=lambda params: nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1)),
    datasets=data,
    collate=collate,
    loss=loss,
    input_key="x",
    mask_key="none",
)
