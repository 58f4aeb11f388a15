"""Broken twin of the BERT task: a sentence classifier on the mean of BERT's last hidden states, the mean taken over
every position (``h.mean(dim=1)``) where it should be over the text (``(h * mask).sum(1) / mask.sum(1)``), the
common mistake of hand-written sentence embeddings. The attention is masked as it should be, every field is read,
the loss falls; but a sentence's features are diluted by however much padding its batch has, so the same sentence
is classified differently in another batch, and at inference. The data gate must say that padding reaches the
predictions."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.shelf import hf_bert_task as base


class MeanPooled(nn.Module):
    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__()
        self.bert = base.build_model(params).bert  # the encoder, frozen as in the base task
        for p in self.bert.parameters():
            p.requires_grad = False
        self.head = nn.Linear(self.bert.config.hidden_size, len(base.LABELS))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(h.mean(dim=1))  # padding averaged in with the text


def loss(model: MeanPooled, batch: dict[str, Any]) -> torch.Tensor:
    return F.cross_entropy(model(batch["input_ids"], batch["attention_mask"]), batch["labels"])


task = dataclasses.replace(
    base.task,
    build_model=MeanPooled,
    loss=loss,
    trainable=lambda model: [n for n, _ in model.named_parameters() if n.startswith("head.")],
)
