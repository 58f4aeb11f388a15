"""A classifier whose loss is ``F.nll_loss`` on raw scores (the ``log_softmax`` forgotten): it starts near 1 (the
output layer's bias), falls like a healthy loss and goes below 0, which no log-likelihood over classes can."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.verdict_tasks.common import FEATURES, collate, data


def build_model(params: dict[str, Any]) -> nn.Module:
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 3))
    with torch.no_grad():
        model[2].bias.fill_(-1.0)
    return model


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return F.nll_loss(model(batch["x"]), batch["labels"])  # the mistake: scores, not log-probabilities


task = Task(
    build_model=build_model,
    datasets=data,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=["neg", "mid", "pos"],
    input_key="x",
)
