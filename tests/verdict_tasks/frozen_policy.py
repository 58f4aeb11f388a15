"""A preference-style task whose reference model is made with ``copy.copy``: freezing the reference froze the policy.

``copy.copy`` of a module copies its ``__dict__`` shallowly, so the copy's submodules (and their parameters) are
the policy's own; ``ref.requires_grad_(False)`` then freezes every parameter, and nothing is left to train.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.verdict_tasks.common import FEATURES, collate, data


class PolicyWithReference(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.policy = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 3))
        self.ref = copy.copy(self.policy)  # the mistake: copy.deepcopy was meant
        self.ref.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            ref = self.ref(x)
        return self.policy(x), ref


def build_model(params: dict[str, Any]) -> nn.Module:
    return PolicyWithReference()


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    logits, ref = model(batch["x"])
    kl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(ref, -1), log_target=True, reduction="batchmean")
    return F.cross_entropy(logits, batch["labels"]) + 0.1 * kl


task = Task(
    build_model=build_model,
    datasets=data,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=["neg", "mid", "pos"],
    input_key="x",
)
