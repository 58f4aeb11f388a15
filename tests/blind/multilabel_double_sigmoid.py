"""Broken twin of the multi-label tagger: the model ends in ``nn.Sigmoid()`` (its outputs read as probabilities at
prediction) while the loss is still ``binary_cross_entropy_with_logits``, which applies a sigmoid of its own. A
positive tag is then at best scored as sigmoid(1) = 0.73 and a negative one as 0.5: the loss falls a little and
stops, the negatives never train. Nothing fails; the forward gate must name the double sigmoid."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from tests.blind import multilabel_task as base


def build_model(params: dict[str, Any]) -> nn.Module:
    hidden = int(params.get("hidden", 32))
    return nn.Sequential(
        nn.Linear(base.FEATURES, hidden),
        nn.ReLU(),
        nn.Linear(hidden, len(base.TAGS)),
        nn.Sigmoid(),  # the mistake: the loss takes logits
    )


def predict(model: nn.Module, batch: dict[str, Any]) -> Any:
    return (model(batch["x"]) > 0.5).float()


task = dataclasses.replace(base.task, build_model=build_model, predict=predict)
