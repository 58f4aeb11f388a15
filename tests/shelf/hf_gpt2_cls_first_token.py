"""Broken twin of the BERT classification task, moved to a decoder: a GPT-2 body with a classifier over
``last_hidden_state[:, 0]``, the [CLS] position of the BERT code it was copied from. In a causal model the first
position attends to itself only, so every sentence gets the features of its first token (here the same start token
for all): the head can learn the label prior and nothing else. The loss falls to the prior's entropy; nothing
fails. The pilot must say the prediction reads only the first token, and where to pool instead."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2Model

from tests.shelf import hf_bert_task as base


class Classifier(nn.Module):
    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__()
        config = GPT2Config(
            vocab_size=base.VOCAB,
            n_positions=64,
            n_embd=int(params.get("hidden", 32)),
            n_layer=2,
            n_head=2,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        self.body = GPT2Model(config)
        self.head = nn.Linear(config.n_embd, len(base.LABELS))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden[:, 0])  # the mistake: BERT's [CLS] position, in a causal model


def build_model(params: dict[str, Any]) -> nn.Module:
    return Classifier(params)


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return F.cross_entropy(model(batch["input_ids"], batch["attention_mask"]), batch["labels"])


task = dataclasses.replace(base.task, build_model=build_model, loss=loss, trainable=None)
