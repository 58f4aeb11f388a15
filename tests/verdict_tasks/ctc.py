"""A CTC sequence model (a small GRU over feature frames) and its twin that feeds raw scores to ``F.ctc_loss``.

``task``: log-probabilities (``log_softmax``) into CTC, a negative log-likelihood that is never below 0.
``raw_scores``: the ``log_softmax`` is forgotten; CTC then sums unnormalised scores and the loss can fall below 0,
an impossible value for a likelihood over discrete targets that a falling loss alone would pass.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task

FRAMES, FEATURES, CLASSES, TARGET = 12, 8, 6, 3  # class 0 is CTC's blank


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 64), ("val", 16)):
        for i in range(n):
            out[split].append(
                {
                    "id": f"{split}{i}",
                    "frames": [[rng.gauss(0, 1) for _ in range(FEATURES)] for _ in range(FRAMES)],
                    "target": [rng.randrange(1, CLASSES) for _ in range(TARGET)],
                }
            )
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    n = len(examples)
    return {
        "features": torch.tensor([e["frames"] for e in examples]),
        "labels": torch.tensor([e["target"] for e in examples]),
        "input_lengths": torch.full((n,), FRAMES, dtype=torch.long),
        "target_lengths": torch.full((n,), TARGET, dtype=torch.long),
    }


class Recogniser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(FEATURES, 32, batch_first=True, bidirectional=True)
        self.out = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(x)[0])


def _ctc(scores: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
    return F.ctc_loss(
        scores.transpose(0, 1), batch["labels"], batch["input_lengths"], batch["target_lengths"], zero_infinity=True
    )


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return _ctc(model(batch["features"]).log_softmax(-1), batch)


def raw_loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return _ctc(model(batch["features"]), batch)  # the mistake: scores, not log-probabilities


def time_loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return _ctc(model(batch["features"]).log_softmax(1), batch)  # the mistake: normalised over time, not classes


task = Task(
    build_model=lambda params: Recogniser(),
    datasets=datasets,
    collate=collate,
    loss=loss,
    input_key="features",
    mask_key="none",
)
raw_scores = dataclasses.replace(task, loss=raw_loss)
over_time = dataclasses.replace(task, loss=time_loss)
