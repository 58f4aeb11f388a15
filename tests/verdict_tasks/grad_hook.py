"""A model whose backward scales its features' gradient by the batch size (a hook): the loss's value decomposes
over examples, its gradient does not, and nothing in the output says why (the accumulation gate's unexplained case).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.verdict_tasks.common import FEATURES, collate, data


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(FEATURES, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.body(x))
        if h.requires_grad:
            h.register_hook(lambda g: g * h.shape[0])
        return self.head(h)


def loss(model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
    return F.cross_entropy(model(batch["x"]), batch["labels"], reduction="sum"), len(batch["labels"])


task = Task(
    build_model=lambda params: Scaled(),
    datasets=data,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=["neg", "mid", "pos"],
    input_key="x",
)
