"""A classifier trained with label-smoothed cross-entropy: its loss has a floor well above 0 (the smoothing's
entropy), so a ratio of its start is the wrong yardstick; the fitted model still predicts every target right."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.verdict_tasks.common import FEATURES, collate, data


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return F.cross_entropy(model(batch["x"]), batch["labels"], label_smoothing=0.5)


task = Task(
    build_model=lambda params: nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 3)),
    datasets=data,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=["neg", "mid", "pos"],
    input_key="x",
)
