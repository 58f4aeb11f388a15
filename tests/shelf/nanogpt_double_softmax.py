"""Broken twin of the nanoGPT task: the loss is the cross-entropy of ``softmax(logits)`` (probabilities handed to
``F.cross_entropy``, which applies log_softmax again). The model still ranks the right character first, so the
fit memorises, but the loss can never go below ln(e + V - 1) - 1 and its gradient flattens as the model learns.
The overfit, run on to where the loss settles, must measure the double softmax."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from tests.shelf import nanogpt_task as base
from tests.shelf.nanogpt import GPT


def loss(model: GPT, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    logits, _ = model(batch["input_ids"], batch["labels"])
    probs = F.softmax(logits, dim=-1)  # the mistake: cross_entropy wants the logits
    return logits, F.cross_entropy(probs.view(-1, probs.size(-1)), batch["labels"].view(-1), ignore_index=-1)


task = dataclasses.replace(base.task, loss=loss)
