"""Broken twin of the ResNet task: a linear probe. ``build_model`` freezes the backbone (``model.resnet``, as one
does over pretrained weights) so only the classifier trains, but leaves its BatchNorm layers to ``model.train()``:
in training mode they normalise with each batch's statistics and update their running statistics, so the "frozen"
backbone changes at every step and evaluation sees statistics other than the ones it was frozen with. The forward
gate must warn, naming the backbone's running statistics."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tests.shelf import resnet_task as base


def build_model(params: dict[str, Any]) -> torch.nn.Module:
    model = base.build_model(params)
    model.resnet.requires_grad_(False)  # .eval() on it after model.train() forgotten
    return model


task = dataclasses.replace(base.task, build_model=build_model)
