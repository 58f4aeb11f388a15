"""Broken twin of the ResNet task: softmax applied before ``F.cross_entropy`` (which applies log_softmax itself).
The head's output is still logits, so the forward gate's "outputs are logits" cannot see it, and at init the loss
is ln C as it should be; the fit even ranks the images right. Only where the loss settles shows it: above the
floor ln(e + C - 1) - 1 of a cross-entropy over probabilities, equal to the cross-entropy of softmax(logits)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from tests.shelf import resnet_task as base


def loss(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    probs = F.softmax(model(pixel_values=batch["pixel_values"]).logits, dim=-1)  # the mistake
    return F.cross_entropy(probs, batch["labels"])


task = dataclasses.replace(base.task, loss=loss)
