"""Broken twin of the GPT-2 task: the user's own AdamW over ``model.parameters()`` with weight decay 0.1 on every
tensor, the LayerNorm gains and the biases included (the Hugging Face Trainer leaves those out of decay)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tests.shelf import hf_gpt2_task as base


def optimizer(model: torch.nn.Module, params: dict[str, Any]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=float(params["lr"]), weight_decay=0.1)


task = dataclasses.replace(base.task, optimizer=optimizer, name="")
