"""Broken twin of the CLIP task: the collate stacks the *first* example's image for every row (a loop variable
reused), so every caption of a batch is paired with the same image and the in-batch negatives are false: the
contrastive loss cannot tell the pairs apart. Every shape and value stays plausible."""

from __future__ import annotations

from typing import Any

import torch

from tests.shelf import hf_clip_task as base


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    first = torch.tensor(examples[0]["image"], dtype=torch.float32)
    batch["pixel_values"] = first.expand(len(examples), *first.shape).clone()
    return batch


task = base.make(collate)
