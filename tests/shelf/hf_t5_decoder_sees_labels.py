"""Broken twin of the T5 task: the collate passes the labels themselves as ``decoder_input_ids`` (the shift right
forgotten), so the decoder reads the very token it must predict at each position and learns to copy it. The
data gate must measure it (``targets aligned``)."""

from __future__ import annotations

from typing import Any

from tests.shelf import hf_t5_task as base
from tests.shelf.synthetic import PAD


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    batch["decoder_input_ids"] = batch["labels"].clamp(min=PAD)  # should be the labels shifted right
    return batch


task = base.make(collate)
