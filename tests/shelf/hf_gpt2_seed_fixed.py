"""Broken twin of the GPT-2 task: ``build_model`` calls transformers' ``set_seed(42)``, as the training script it was
moved from did at its start. Every seed of the campaign then builds the same weights and draws the same dropout
masks: three seeds train one run three times, and the spread the notebook shows across seeds measures nothing.
The forward gate must fail, naming the line that seeded."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from transformers import set_seed

from tests.shelf import hf_gpt2_task as base


def build_model(params: dict[str, Any]) -> torch.nn.Module:
    set_seed(42)  # the mistake: a fixed seed, where Cockpit has seeded this run with its own
    return base.build_model(params)


task = dataclasses.replace(base.task, build_model=build_model)
