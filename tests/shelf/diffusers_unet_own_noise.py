"""Broken twin of the diffusion task: the collate draws the training noise from a NumPy generator of its own
(``np.random.default_rng()``, never seeded), so no seed reproduces a batch: validation, resume and replay
cannot be compared. The data gate must say the collate is not reproducible."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tests.shelf import diffusers_unet_task as base

RNG = np.random.default_rng()


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    batch["noise"] = torch.from_numpy(RNG.standard_normal(batch["images"].shape).astype(np.float32))
    return batch


task = base.make(collate)
