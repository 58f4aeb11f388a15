"""A Hugging Face user's task: GPT-2 (tiny, random init) fine-tuned on prompt -> answer with the prompt masked.

Labels are the input ids with -100 on the prompt and the padding, and the
model shifts them inside (the Hugging Face convention). The loss is computed
from the model's logits as a sum with the count of supervised tokens, so an
accumulated update weighs every token the same.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from cockpit.pilot.task import Task
from tests.shelf.pairs import pairs

CHARS = [chr(c) for c in range(32, 127)]
PAD, EOS = 0, 1
STOI = {c: i + 2 for i, c in enumerate(CHARS)}
VOCAB = len(CHARS) + 2
IGNORE = -100  # what the prompt and the padding are labelled with


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return pairs(int(params.get("train_examples", 256)), int(params.get("val_examples", 32)))


def encode(text: str) -> list[int]:
    return [STOI[c] for c in text]


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    rows, labels = [], []
    limit = int(params.get("max_length", 32))
    for e in examples:
        p, a = encode(e["prompt"]), encode(e["answer"]) + [EOS]
        ids = (p + a)[:limit]
        rows.append(ids)
        labels.append(([IGNORE] * len(p) + a)[:limit])
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    lab = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for i, (r, lb) in enumerate(zip(rows, labels, strict=True)):
        input_ids[i, : len(r)] = torch.tensor(r)
        attention[i, : len(r)] = 1
        lab[i, : len(lb)] = torch.tensor(lb)
    return {"input_ids": input_ids, "attention_mask": attention, "labels": lab, "ids": [e["id"] for e in examples]}


def build_model(params: dict[str, Any]) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=int(params.get("max_length", 32)),
        n_embd=int(params.get("n_embd", 64)),
        n_layer=int(params.get("n_layer", 2)),
        n_head=int(params.get("n_head", 2)),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=EOS,
        eos_token_id=EOS,
    )
    return GPT2LMHeadModel(config)


def loss(model: GPT2LMHeadModel, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = out.logits[:, :-1].float()
    target = batch["labels"][:, 1:]
    total = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return total, (target != IGNORE).sum()


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="generation",
    ignore_index=IGNORE,
    label_convention="shift_in_loss",
    instruction_is_input=True,
    vocab_size=lambda params: VOCAB,
    max_length=lambda params: int(params.get("max_length", 32)),
    length=lambda e: len(e["prompt"]) + len(e["answer"]) + 1,
    group_unit="word",
)
