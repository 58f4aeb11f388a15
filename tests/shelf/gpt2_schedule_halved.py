"""Broken twin of the GPT-2 task: the Hugging Face linear schedule handed as ``Task.scheduler`` with its horizon
divided by the accumulation, as if ``updates`` counted microbatches: it reaches 0 halfway through the run, and the
second half trains at learning rate 0."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from transformers import get_linear_schedule_with_warmup

from tests.shelf import hf_gpt2_task as base


def scheduler(optimizer: torch.optim.Optimizer, params: dict[str, Any]) -> Any:
    steps = int(params.get("updates") or 200) // int(params.get("accumulation") or 1)
    return get_linear_schedule_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=steps)


task = dataclasses.replace(base.task, scheduler=scheduler, name="")
