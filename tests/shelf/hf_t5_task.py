"""An encoder-decoder: Hugging Face T5 (tiny, random init) mapping a prompt to its answer.

The encoder reads the prompt; the labels are the answer followed by the end of sequence, padded with -100;
T5 makes its decoder inputs from the labels itself (shifted right from the decoder start token). The labels
have the decoder's length, not the encoder input's.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import T5Config, T5ForConditionalGeneration

from cockpit.pilot.task import Task
from tests.shelf.synthetic import EOS, PAD, VOCAB, encode, pad, text_pairs


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    src = pad([encode(e["prompt"]) for e in examples], PAD)
    labels = pad([encode(e["answer"]) + [EOS] for e in examples], -100)
    return {"input_ids": src, "attention_mask": (src != PAD).long(), "labels": labels}


def build_model(params: dict[str, Any]) -> T5ForConditionalGeneration:
    config = T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        dropout_rate=0.0,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
    )
    return T5ForConditionalGeneration(config)


def loss(model: T5ForConditionalGeneration, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(**{k: v for k, v in batch.items() if torch.is_tensor(v)})
    count = (batch["labels"] != -100).sum()
    return out.loss * count, count


def make(collate_fn: Any = collate) -> Task:
    return Task(
        build_model=build_model,
        datasets=text_pairs,
        collate=collate_fn,
        loss=loss,
        kind="generation",
        vocab_size=lambda params: VOCAB,
        group_unit="word",
    )


task = make()
