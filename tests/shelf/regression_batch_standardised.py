"""Broken twin of the regression task: the model standardises its features inside ``forward`` with the mean and
standard deviation of the batch it is given (``x.mean(0)``, a user's stand-in for fitting a scaler), so every
example's prediction depends on which other examples share its batch, in training and at inference alike. The
data gate must measure that the examples mix, and where."""

from __future__ import annotations

import torch
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf import regression_task as base


class Standardised(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = base.build_model({})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - x.mean(0)) / (x.std(0) + 1e-6))


task = Task(
    build_model=lambda params: Standardised(),
    datasets=base.datasets,
    collate=base.collate,
    loss=base.loss,
    kind="other",
    input_key="features",
    group_unit="row",
)
