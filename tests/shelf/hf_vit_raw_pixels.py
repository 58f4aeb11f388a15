"""Broken twin of the ViT task: the dataset holds its images as 8-bit pixels (0..255, as decoded from PNG files)
and the collate turns them into floats without normalising them (no image processor, no ``/ 255`` and mean/std):
the model, built for normalised inputs, sees values a hundred times too large. The data gate must warn, naming
the raw pixel values."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.shelf import hf_vit_task as base


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out = base.datasets(params)
    for split in out.values():
        for e in split:  # the image as stored: 8-bit intensities
            e["image"] = [
                [[round(min(max((v + 1.0) / 4.0, 0.0), 1.0) * 255) for v in row] for row in ch] for ch in e["image"]
            ]
    return out


task = dataclasses.replace(base.task, datasets=datasets)
