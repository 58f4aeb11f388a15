"""Broken twin of the GPT-2 task: fine-tuning in "pure bf16". ``build_model`` casts the model to bfloat16 to halve
its memory, and the task's AdamW then adds each update to the bf16 weights themselves at a fine-tuning rate (2e-5).
bf16 keeps 8 significant bits: for most weights an update that small is below half the spacing between
neighbouring values and rounds back to the same weight. The loss creeps and stalls; nothing fails. The first
update's gate must fail, naming the rounding, the rate and where the model is cast."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tests.shelf import hf_gpt2_task as base


def build_model(params: dict[str, Any]) -> torch.nn.Module:
    return base.build_model(params).to(torch.bfloat16)  # the mistake: weights, not only the compute, in bf16


task = dataclasses.replace(base.task, build_model=build_model)
