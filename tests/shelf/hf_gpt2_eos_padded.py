"""Broken twin of the GPT-2 task: padded with the end token, and the labels masked by the pad id.

``tokenizer.pad_token = tokenizer.eos_token`` and then ``labels[input_ids == tokenizer.pad_token_id] = -100`` (what
transformers' ``DataCollatorForLanguageModeling`` does) masks the end token that closes each answer along with the
padding: the model never learns to stop. The data gate must fail at "end of text is a target".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tests.shelf import hf_gpt2_task as base

PAD = base.EOS  # tokenizer.pad_token = tokenizer.eos_token


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    limit = int(params.get("max_length", 32))
    rows = [
        (base.encode(e["prompt"]), (base.encode(e["prompt"]) + base.encode(e["answer"]) + [base.EOS])[:limit])
        for e in examples
    ]
    width = max(len(ids) for _, ids in rows)
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (_, ids) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
    labels = input_ids.clone()
    labels[input_ids == PAD] = base.IGNORE  # the padding, and with it every end token
    for i, (prompt, _) in enumerate(rows):
        labels[i, : len(prompt)] = base.IGNORE
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels, "ids": [e["id"] for e in examples]}


task = dataclasses.replace(base.task, collate=collate, name="")  # the base task but for its collate
