"""Broken twin of the regression task: a heteroscedastic head (a mean and a log-variance per example) trained on
the Gaussian log-likelihood with its sign wrong: the user wrote the log-likelihood and forgot to negate it, so
minimising it pushes the mean away from the target and the loss has no lower bound. At a glance it falls nicely;
run on past the fit, it falls faster and faster. The overfit must call it unbounded below."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf import regression_task as base


def build_model(params: dict[str, Any]) -> nn.Module:
    return nn.Sequential(nn.Linear(base.FEATURES, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    mean, logvar = model(batch["features"]).unbind(-1)
    y = batch["labels"].squeeze(-1)
    loglik = -0.5 * (logvar + (y - mean) ** 2 / logvar.exp() + math.log(2 * math.pi))
    return loglik.mean()  # the mistake: the log-likelihood, where its negative belongs


task = Task(
    build_model=build_model,
    datasets=base.datasets,
    collate=base.collate,
    loss=loss,
    kind="other",
    input_key="features",
    group_unit="row",
)
