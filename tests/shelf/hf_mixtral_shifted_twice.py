"""Broken twin of the Mixtral task: the collator shifts the labels by hand (``labels = input_ids[1:]``), as for a
model that does not shift, and Mixtral shifts them again. Every shape and value stays plausible; the model learns
to predict the token two ahead. The data gate must measure it (``targets aligned``)."""

from __future__ import annotations

from typing import Any

from tests.shelf import hf_mixtral_task as base
from tests.shelf.synthetic import PAD, pad


def collator(features: list[dict[str, Any]]) -> dict[str, Any]:
    ids = [f["input_ids"] for f in features]
    labels = [f["labels"][1:] + [-100] for f in features]  # "next token" labels, for a model that does not shift
    input_ids = pad(ids, PAD)
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": pad(labels, -100)}


task = base.make(collator)
