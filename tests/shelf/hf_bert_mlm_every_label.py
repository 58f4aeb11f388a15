"""Broken twin of the masked LM: the labels are the original token at *every* position, not only at the chosen
ones. 85 % of the targets are then visible in the input at their own position, and the model mostly learns to
copy it. The data gate must measure it (``targets aligned``)."""

from __future__ import annotations

from typing import Any

from tests.shelf import hf_bert_mlm_task as base
from tests.shelf.synthetic import PAD


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    ids = base.tokens(examples)
    batch["labels"] = ids.masked_fill(ids == PAD, -100)  # every real token a target
    return batch


task = base.make(collate)
