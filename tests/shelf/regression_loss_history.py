"""Broken twin of the regression task: the loss is an object that keeps every step's loss for a plot at the end,
appending the loss tensor itself (``self.history.append(loss)``) instead of ``loss.item()``. Each kept loss holds its
step's autograd graph, so memory grows with every step of the long run while the loss curve looks healthy. The
update_second gate must name ``history``."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from tests.shelf import regression_task as base


class TrackedLoss:
    """The MSE, with the history of every step's value kept for a plot."""

    def __init__(self) -> None:
        self.history: list[torch.Tensor] = []

    def __call__(self, model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        loss = base.loss(model, batch)
        self.history.append(loss)  # meant: loss.item()
        return loss


task = dataclasses.replace(base.make(), loss=TrackedLoss())
