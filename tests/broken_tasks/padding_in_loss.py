"""tinylm whose labels are shifted from the *padded* inputs: padding is supervised."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cockpit.tasks import tinylm as t


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = t.collate(examples, params)
    labels = batch["labels"]
    pad = batch["attention_mask"] == 0
    labels[pad] = t.PAD  # the pad token id where -100 belongs
    batch["loss_mask"] = (labels != -100).long()
    return batch


task = replace(t.task, collate=collate, name="padding_in_loss")
