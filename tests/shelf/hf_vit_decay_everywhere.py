"""Broken twin of the ViT task: the user's own AdamW over ``model.parameters()`` with weight decay 0.05 (a ViT
recipe's rate) on every tensor, the LayerNorm gains, biases, class token and position embeddings' neighbours
included."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tests.shelf import hf_vit_task as base


def optimizer(model: torch.nn.Module, params: dict[str, Any]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=float(params["lr"]), weight_decay=0.05)


task = dataclasses.replace(base.task, optimizer=optimizer, name="")
