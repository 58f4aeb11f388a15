"""A LoRA adapter loaded for inference: ``PeftModel.from_pretrained(..., is_trainable=False)`` freezes the adapter
too, so nothing requires grad (the same mistake as a frozen policy, through PEFT). The adapter is saved from a
tiny random-init GPT-2 into a temporary folder first (nothing is downloaded)."""

from __future__ import annotations

import tempfile
from typing import Any

from torch import nn

from cockpit.pilot.task import Task
from tests.verdict_tasks.words import copy_pairs

VOCAB = 64


def _base() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=1, n_head=2))


def build_model(params: dict[str, Any]) -> nn.Module:
    from peft import LoraConfig, PeftModel, get_peft_model

    folder = tempfile.mkdtemp(prefix="cockpit-lora-")
    get_peft_model(_base(), LoraConfig(r=4, target_modules=["c_attn"], task_type="CAUSAL_LM")).save_pretrained(folder)
    return PeftModel.from_pretrained(_base(), folder, is_trainable=False)  # the mistake: loaded for inference


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    import torch

    ids = torch.tensor([[2 + (hash(w) % (VOCAB - 2)) for w in (e["prompt"].split() * 4)[:8]] for e in examples])
    return {"input_ids": ids, "labels": ids.clone()}


task = Task(
    build_model=build_model,
    datasets=lambda params: copy_pairs(),
    collate=collate,
    kind="generation",
    label_convention="shift_in_loss",
)
