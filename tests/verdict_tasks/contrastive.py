"""A hand-written dual encoder with an InfoNCE loss over in-batch negatives (plain torch: no output names it).

``task`` does not declare its batch-level term (the accumulation gate warns, naming it and its size);
``declared`` says ``batch_level_loss=True`` (the same difference is an expected note on a pass).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.verdict_tasks.common import FEATURES, data


class DualEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 8))
        self.b = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 8))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.a(x), dim=-1) @ F.normalize(self.b(y), dim=-1).T * 10.0


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["x"] for e in examples])
    return {"x": x, "y": x.flip(-1) + 0.1 * x}  # a second view of each example


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    scores = model(batch["x"], batch["y"])
    target = torch.arange(scores.shape[0])
    return (F.cross_entropy(scores, target) + F.cross_entropy(scores.T, target)) / 2


task = Task(build_model=lambda params: DualEncoder(), datasets=data, collate=collate, loss=loss, label_key="none")
declared = dataclasses.replace(task, batch_level_loss=True)
