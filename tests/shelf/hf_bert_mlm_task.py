"""A masked LM: Hugging Face BERT (tiny, random init) trained as BERT was: 15 % of the tokens chosen at random (from
torch's generator, so the run's seed reproduces it), 80 % of those replaced by [MASK], 10 % by a random token,
10 % kept; the labels are the original tokens at the chosen positions and -100 elsewhere.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import BertConfig, BertForMaskedLM

from cockpit.pilot.task import Task
from tests.shelf.synthetic import PAD, STOI, encode, pad, text_pairs

MASK = len(STOI) + 3
VOCAB = MASK + 1


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return text_pairs(params)


def tokens(examples: list[dict[str, Any]]) -> torch.Tensor:
    return pad([encode(e["prompt"] + e["answer"]) for e in examples], PAD)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    ids = tokens(examples)
    real = ids != PAD
    chosen = (torch.rand(ids.shape) < 0.15) & real
    chosen[:, 0] |= ~chosen.any(1)  # every row supervises at least one token
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    draw = torch.rand(ids.shape)
    inputs = ids.clone()
    inputs[chosen & (draw < 0.8)] = MASK
    swap = chosen & (draw >= 0.8) & (draw < 0.9)
    inputs[swap] = torch.randint(3, MASK, (int(swap.sum()),))
    return {"input_ids": inputs, "attention_mask": real.long(), "labels": labels}


def build_model(params: dict[str, Any]) -> BertForMaskedLM:
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=PAD,
    )
    return BertForMaskedLM(config)


def make(collate_fn: Any = collate) -> Task:
    return Task(
        build_model=build_model,
        datasets=datasets,
        collate=collate_fn,
        kind="generation",
        causal=False,
        vocab_size=lambda params: VOCAB,
        group_unit="word",
    )


task = make()
