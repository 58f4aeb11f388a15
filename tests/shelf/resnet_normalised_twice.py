"""Broken twin of the ResNet task: the images come out of the dataset already normalised, and the collate
normalises them again with ImageNet's mean and std (a transform pipeline that applies ``Normalize`` on top of an
image processor that already did): every channel's std is multiplied by about 4.4 and its mean shifted by about -2.
The data gate must warn, naming the doubled normalisation."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tests.shelf import resnet_task as base

MEAN = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
STD = torch.tensor([0.229, 0.224, 0.225])[:, None, None]


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    batch["pixel_values"] = (batch["pixel_values"] - MEAN) / STD  # already normalised: the second time
    return batch


task = dataclasses.replace(base.task, collate=collate)
