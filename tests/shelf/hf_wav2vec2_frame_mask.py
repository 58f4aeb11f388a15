"""Broken twin of the CTC task: the attention mask is made at the rate of the model's output frames (one per 10
samples) instead of one per audio sample. Wav2Vec2 reads the mask's row sums as lengths, so it masks out most of
every recording. The data gate must say the mask does not match the input."""

from __future__ import annotations

from typing import Any

from tests.shelf import hf_wav2vec2_ctc_task as base


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    batch["attention_mask"] = batch["attention_mask"][:, ::10].contiguous()  # frames, not samples
    return batch


task = base.make(collate)
