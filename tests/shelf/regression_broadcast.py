"""Broken twin of the regression task: the targets are collated as a vector (batch,) while the model outputs
(batch, 1); ``F.mse_loss`` broadcasts the two to (batch, batch), so every output is scored against every
example's target and the model learns the batch mean. The data gate must measure which output each target
is scored against."""

from __future__ import annotations

from typing import Any

from tests.shelf import regression_task as base


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    batch["labels"] = batch["labels"].squeeze(1)  # (B,) against the model's (B, 1)
    return batch


task = base.make(collate)
