"""Broken twin of the ResNet task: a random horizontal flip drawn from NumPy, the generator seeded from each
example's seed inside the collate "so runs are reproducible": every epoch flips the same images the same way."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from tests.shelf import resnet_task as base


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    rows = []
    for e, x in zip(examples, batch["pixel_values"], strict=True):
        np.random.seed(e["seed"])
        rows.append(x.flip(-1) if np.random.rand() < 0.5 else x)
    batch["pixel_values"] = torch.stack(rows)
    return batch


task = dataclasses.replace(base.task, collate=collate, name="")
