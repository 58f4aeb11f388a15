"""Broken twin of the regression task: the loss adds a weight penalty and returns its terms by name, but the
penalty is computed on detached weights (``p.detach()``, to keep it "out of the graph" for logging), so it adds to
the loss and trains nothing: it never falls while the squared error does. The forward gate names the detached
term; the overfit reads each term before and after the fit and must name the one that did not fall."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf import regression_task as base

WEIGHT = 0.05


def loss(model: nn.Module, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    mse = F.mse_loss(model(batch["features"]), batch["labels"])
    penalty = sum((p.detach() ** 2).sum() for p in model.parameters())  # the mistake: detached
    assert isinstance(penalty, torch.Tensor)
    return {"loss": mse + WEIGHT * penalty, "mse": mse, "penalty": penalty}


task = Task(
    build_model=base.build_model,
    datasets=base.datasets,
    collate=base.collate,
    loss=loss,
    kind="other",
    input_key="features",
    group_unit="row",
)
