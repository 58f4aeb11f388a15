"""Broken twin of the GPT-2 task: the loss keeps a running total of the token loss on the model, for a smoothed
log line, as a tensor (``model.loss_total = model.loss_total + total``) instead of a number. The total stays attached
to the autograd graph, which it chains from one step to the next, so memory grows with every step while the loss
falls as it should. The update_second gate must name ``loss_total``."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from transformers import GPT2LMHeadModel

from tests.shelf import hf_gpt2_task as base


def loss(model: GPT2LMHeadModel, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    total, count = base.loss(model, batch)
    model.loss_total = getattr(model, "loss_total", 0.0) + total  # meant: total.item()
    return total, count


task = dataclasses.replace(base.task, loss=loss)
