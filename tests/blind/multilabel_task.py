"""Multi-label classification with BCEWithLogits: a small MLP tags 16-feature readings with any of four tags,
the labels a float multi-hot vector per example (zero, one or several tags on)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf.synthetic import generator, split

TAGS = ["hot", "wet", "windy", "bright"]
FEATURES = 16


def reading(i: int) -> dict[str, Any]:
    x = torch.randn(FEATURES, generator=generator(i, 53))
    on = [float(x[2 * k] + 0.5 * x[2 * k + 1] > 0.3) for k in range(len(TAGS))]
    return {"x": x.tolist(), "tags": on}


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(int(params.get("train_examples", 128)), int(params.get("val_examples", 32)), reading, groups=2)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {
        "x": torch.tensor([e["x"] for e in examples]),
        "labels": torch.tensor([e["tags"] for e in examples], dtype=torch.float32),
    }


def build_model(params: dict[str, Any]) -> nn.Module:
    hidden = int(params.get("hidden", 32))
    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, len(TAGS)))


def loss(model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
    logits = model(batch["x"])
    return F.binary_cross_entropy_with_logits(logits, batch["labels"], reduction="sum"), batch["labels"].numel()


def predict(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return (model(batch["x"]) > 0).float()


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=TAGS,
    input_key="x",
    predict=predict,
    group_unit="station",
)
