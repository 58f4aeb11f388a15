"""A seq2seq summariser-style model: Hugging Face BART (tiny, random init) mapping a prompt to its answer.

Written as a BART user would: the labels are the answer's tokens followed by </s>, padded with -100; BART builds
its decoder inputs from the labels itself (``shift_tokens_right`` with ``decoder_start_token_id``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import BartConfig, BartForConditionalGeneration

from cockpit.pilot.task import Task
from tests.shelf.synthetic import EOS, PAD, VOCAB, encode, pad, text_pairs


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    src = pad([encode(e["prompt"]) + [EOS] for e in examples], PAD)
    labels = pad([encode(e["answer"]) + [EOS] for e in examples], -100)
    return {"input_ids": src, "attention_mask": (src != PAD).long(), "labels": labels}


def build_model(params: dict[str, Any]) -> BartForConditionalGeneration:
    config = BartConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        dropout=0.1,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=EOS,
        decoder_start_token_id=EOS,
        forced_eos_token_id=EOS,
    )
    return BartForConditionalGeneration(config)


def loss(model: BartForConditionalGeneration, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(**{k: v for k, v in batch.items() if torch.is_tensor(v)})
    count = (batch["labels"] != -100).sum()
    return out.loss * count, count


task = Task(
    build_model=build_model,
    datasets=text_pairs,
    collate=collate,
    loss=loss,
    kind="generation",
    vocab_size=lambda params: VOCAB,
    group_unit="word",
)
