"""Broken twin of the GPT-2 task: the prompt is masked with -1, but the loss ignores -100.

The masked prompt tokens then count in the loss with target -1 (out of the
vocabulary): the data gate must fail at "targets in range", naming examples.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.shelf import hf_gpt2_task as base


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    prompt = batch["labels"].eq(base.IGNORE) & batch["attention_mask"].bool()
    batch["labels"] = batch["labels"].masked_fill(prompt, -1)  # the wrong mark for "not a target"
    return batch


task = dataclasses.replace(base.task, collate=collate, name="")  # the base task but for its collate
