"""A tabular regression: a small MLP (torch.nn) predicting a continuous target from 6 numeric features with MSE,
the target shaped (batch, 1) like the model's output."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf.synthetic import generator, split

FEATURES = 6
WEIGHTS = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.5, -0.5])


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def make(i: int) -> dict[str, Any]:
        x = torch.randn(FEATURES, generator=generator(i, 17))
        y = float(x @ WEIGHTS + 0.5 * torch.sin(3 * x[0]))
        return {"features": x.tolist(), "target": y}

    return split(int(params.get("train_examples", 48)), int(params.get("val_examples", 16)), make)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["features"] for e in examples], dtype=torch.float32)
    y = torch.tensor([[e["target"]] for e in examples], dtype=torch.float32)
    return {"features": x, "labels": y}


def build_model(params: dict[str, Any]) -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return F.mse_loss(model(batch["features"]), batch["labels"])


def make(collate_fn: Any = collate) -> Task:
    return Task(
        build_model=build_model,
        datasets=datasets,
        collate=collate_fn,
        loss=loss,
        kind="other",
        input_key="features",
        group_unit="row",
    )


task = make()
