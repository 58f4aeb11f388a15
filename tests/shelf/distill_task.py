"""Distillation with a frozen teacher: a tiny GPT-2 student learns from a larger frozen GPT-2 teacher (both
Hugging Face, random init; the teacher's weights seeded apart so they are the same in every build) and from the
data. The loss mixes the next-token cross-entropy with the KL divergence to the teacher's softened distribution
(temperature 2), as Hinton et al. and DistilBERT do. One module holds both; only the student requires grad.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from cockpit.pilot.task import Task
from tests.shelf.synthetic import EOS, PAD, VOCAB, encode, pad, text_pairs

TEMPERATURE, ALPHA = 2.0, 0.5


def gpt2(n_embd: int, n_layer: int) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=EOS,
        eos_token_id=EOS,
    )
    return GPT2LMHeadModel(config)


class Distiller(nn.Module):
    def __init__(self, student: nn.Module, teacher: nn.Module) -> None:
        super().__init__()
        self.student, self.teacher = student, teacher

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.student(input_ids=input_ids, attention_mask=attention_mask).logits


def teacher() -> GPT2LMHeadModel:
    with torch.random.fork_rng():
        torch.manual_seed(1234)  # the teacher's weights: the same in every build (a checkpoint, in real life)
        t = gpt2(48, 2)
    return t


def build_model(params: dict[str, Any]) -> Distiller:
    t = teacher().eval()
    t.requires_grad_(False)
    return Distiller(gpt2(32, 1), t)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    ids = pad([encode(e["prompt"] + e["answer"]) + [EOS] for e in examples], PAD)
    labels = pad([[-100] * len(e["prompt"]) + encode(e["answer"]) + [EOS] for e in examples], -100)
    return {"input_ids": ids, "attention_mask": (ids != PAD).long(), "labels": labels}


def loss(model: Distiller, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum over answer tokens, their count): every token of an accumulated update weighs the same."""
    logits = model(batch["input_ids"], batch["attention_mask"])[:, :-1]
    with torch.no_grad():
        model.teacher.eval()
        t = model.teacher(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    target = batch["labels"][:, 1:]
    keep = target != -100
    ce = F.cross_entropy(logits[keep], target[keep], reduction="sum")
    kl = F.kl_div(
        F.log_softmax(logits[keep] / TEMPERATURE, -1),
        F.log_softmax(t[keep] / TEMPERATURE, -1),
        log_target=True,
        reduction="sum",
    )
    return (1 - ALPHA) * ce + ALPHA * TEMPERATURE**2 * kl, keep.sum()


def make(build: Any = build_model) -> Task:
    return Task(
        build_model=build,
        datasets=text_pairs,
        collate=collate,
        loss=loss,
        kind="generation",
        label_convention="shift_in_loss",
        instruction_is_input=True,
        vocab_size=lambda params: VOCAB,
        trainable=lambda model: [n for n, _ in model.student.named_parameters(prefix="student")],
        group_unit="word",
    )


task = make()
