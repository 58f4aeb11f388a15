"""A classifier whose output layer does not train and follows a norm (the shape of a LoRA adapter over a random
base, where the frozen head's small rows after the final RMSNorm bound every logit): its ranking learns the
targets, but its confidence stays so low that its loss can never go below the loss of a model that ignores its
input (the targets' entropy): measured on the shelf's LoRA, 4.08 with 90 % of the targets right against 3.05."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task

FEATURES, CLASSES, WIDTH = 6, 10, 8
SCALE = 0.1  # the norm of each frozen output row: every logit lies within +-SCALE


def data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 64), ("val", 16)):
        for i in range(n):
            x = [rng.gauss(0, 1) for _ in range(FEATURES)]
            out[split].append({"id": f"{split}{i}", "x": x, "y": rng.randrange(CLASSES)})
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {"x": torch.tensor([e["x"] for e in examples]), "labels": torch.tensor([e["y"] for e in examples])}


class Capped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, WIDTH))
        self.head = nn.Linear(WIDTH, CLASSES, bias=False)
        with torch.no_grad():
            self.head.weight.mul_(SCALE / self.head.weight.norm(dim=1, keepdim=True))
        self.head.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.normalize(self.body(x), dim=-1))


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return F.cross_entropy(model(batch["x"]), batch["labels"])


task = Task(
    build_model=lambda params: Capped(),
    datasets=data,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=[f"c{i}" for i in range(CLASSES)],
    input_key="x",
)


class CappedBlind(Capped):
    """The same bounded output, but the input never reaches it: the body reads one fixed vector for every row."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("fixed", torch.randn(FEATURES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.normalize(self.body(self.fixed), dim=-1)).expand(x.shape[0], CLASSES)


blind = dataclasses.replace(task, build_model=lambda params: CappedBlind())
