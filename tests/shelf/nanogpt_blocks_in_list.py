"""Broken twin of the nanoGPT task: a refactor holds the transformer's blocks in a plain Python list
(``self.blocks = [Block(config) for ...]``) where nanoGPT has ``nn.ModuleList``. ``forward`` runs them and they get
gradients, but ``model.parameters()`` does not list them: nanoGPT's ``configure_optimizers`` never sees them, so
they stay at their initial values while the embeddings and the head train around them, and ``state_dict()`` never
saves them. Every gate passed it: the loss falls, the overfit memorises, and the resume and the export agree
because a new process builds the same blocks from the same seed. The backward gate must name the blocks."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tests.shelf import nanogpt_task as base
from tests.shelf.nanogpt import GPT


class ListGPT(GPT):
    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.blocks = list(self.transformer.h)  # the mistake: a list, where nn.ModuleList registers them
        del self.transformer["h"]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = torch.nn.functional.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        return logits, loss


def build_model(params: dict[str, Any]) -> ListGPT:
    return ListGPT(base.build_model(params).config)


task = dataclasses.replace(base.task, build_model=build_model)
