"""Classifier bugs in the model: one that cannot learn, one initialised far from uniform.

``task`` pools the first position only (the CLS token, identical in every
row) instead of the masked mean: every example gets the same features, so the
model can only learn the class frequencies. Every parameter still gets a
finite gradient and changes, so only the overfit gate can tell.

``hot`` multiplies the output layer's initial weights by 200: the first loss
is far above ln 4.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from cockpit.tasks import classifier as c


class FirstToken(c.BagClassifier):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.emb(input_ids)[:, 0])


def _first_token(params: dict[str, Any]) -> nn.Module:
    return FirstToken(int(params.get("d_model", 32)), int(params.get("hidden", 64)), len(c.LABEL_NAMES), 0.0)


task = replace(c.task, build_model=_first_token, name="cannot_learn")


def _hot(params: dict[str, Any]) -> nn.Module:
    model = c.build_model(params)
    with torch.no_grad():
        model.mlp[-1].weight.mul_(200.0)
    return model


hot = replace(c.task, build_model=_hot, name="hot_init")
