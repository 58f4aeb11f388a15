"""Broken twin of the ResNet task: the loss sums the cross-entropy over the microbatch (``reduction="sum"``) where
the mean is meant, so it is 8 times the mean at microbatch 8 (and the effective learning rate, the gradient
clipping and accumulation all move with the microbatch). The forward gate must name the sum and its factor."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from tests.shelf import resnet_task as base


def loss(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    logits = model(pixel_values=batch["pixel_values"]).logits
    return F.cross_entropy(logits, batch["labels"], reduction="sum")  # the mistake: a sum returned as the loss


task = dataclasses.replace(base.task, loss=loss)
