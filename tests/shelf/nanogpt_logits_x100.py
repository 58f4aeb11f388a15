"""Broken twin of the nanoGPT task: the head multiplies its logits by 100 (a logit scale meant for a similarity
head, or a temperature of 0.01 applied in training), so the first loss is tens of nats where uniform predictions
over the characters give ln V. The forward gate must say how far above, and that the logits' scale makes it."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from tests.shelf import nanogpt_task as base
from tests.shelf.nanogpt import GPT

SCALE = 100.0


class ScaledGPT(GPT):
    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = SCALE * self.lm_head(self.transformer.ln_f(x))  # the mistake: a scale left in the head
        if targets is None:
            return logits[:, [-1], :], None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def build_model(params: dict[str, Any]) -> GPT:
    healthy = base.build_model(params)
    model = ScaledGPT(healthy.config)
    model.load_state_dict(healthy.state_dict())
    return model


task = dataclasses.replace(base.task, build_model=build_model)
