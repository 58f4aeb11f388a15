"""Broken twin of the Whisper task: the transcripts are padded with the tokenizer's pad token instead of -100
(the step transformers' speech seq2seq collator does by hand, forgotten), so every padded position is a target
and the model learns to emit padding after each word. The data gate must say the targets are padded with a
real token."""

from __future__ import annotations

from typing import Any

from cockpit.pilot.task import Task
from tests.shelf import hf_whisper_task as base
from tests.shelf.synthetic import PAD


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == -100, PAD)
    return batch


task = Task(**{**base.task.__dict__, "collate": collate, "name": ""})
