"""Broken twin of the regression task: Gaussian noise added to the features as augmentation, after
``torch.manual_seed(0)`` in the collate: every batch draws the same noise pattern in every epoch, and torch's
generator restarts from 0 after each batch."""

from __future__ import annotations

from typing import Any

import torch

from tests.shelf import regression_task as base


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    torch.manual_seed(0)
    batch["features"] = batch["features"] + 0.05 * torch.randn_like(batch["features"])
    return batch


task = base.make(collate)
