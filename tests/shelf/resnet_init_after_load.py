"""Broken twin of the ResNet task: fine-tuning from pretrained weights, ``build_model`` loads them, then runs the
initialisation written for the new classifier over the whole model (``model.apply(init_weights)``), so every
convolution's pretrained weights are drawn afresh. Nothing fails: the loss falls as it would from scratch, and the
run is believed pretrained. The forward gate must fail, naming the load's line and the initialisation after it."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from tests.shelf import resnet_task as base


def pretrained_weights(params: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Stands in for a downloaded checkpoint (the shelf reaches no network): the same model under another seed."""
    with torch.random.fork_rng():
        torch.manual_seed(1234)
        return base.build_model(params).state_dict()


def init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    elif isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.01)
        nn.init.zeros_(m.bias)


def build_model(params: dict[str, Any]) -> torch.nn.Module:
    model = base.build_model(params)
    model.load_state_dict(pretrained_weights(params))
    model.apply(init_weights)  # the mistake: meant for the classifier, run over the pretrained body too
    return model


task = dataclasses.replace(base.task, build_model=build_model)
