"""Broken twin of the distillation task: the teacher keeps GPT-2's default dropout (0.1, as a checkpoint's config
has it) and is put in eval mode once, in ``build_model``; the loss no longer calls ``model.teacher.eval()``. The
training loop's ``model.train()`` sets the teacher back to training mode, so its logits, the student's target, are
random from call to call. The forward gate must name the teacher."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from tests.shelf import distill_task as base
from tests.shelf.synthetic import EOS, VOCAB


def teacher() -> GPT2LMHeadModel:
    with torch.random.fork_rng():
        torch.manual_seed(1234)
        config = GPT2Config(
            vocab_size=VOCAB, n_positions=64, n_embd=48, n_layer=2, n_head=2, bos_token_id=EOS, eos_token_id=EOS
        )  # dropout left at GPT-2's defaults (0.1)
        return GPT2LMHeadModel(config)


def build(params: dict[str, Any]) -> base.Distiller:
    t = teacher().eval()  # once, here: the training loop's model.train() undoes it
    t.requires_grad_(False)
    return base.Distiller(base.gpt2(32, 1), t)


def loss(model: base.Distiller, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(batch["input_ids"], batch["attention_mask"])[:, :-1]
    with torch.no_grad():  # model.teacher.eval() forgotten
        t = model.teacher(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    target = batch["labels"][:, 1:]
    keep = target != -100
    ce = F.cross_entropy(logits[keep], target[keep], reduction="sum")
    kl = F.kl_div(
        F.log_softmax(logits[keep] / base.TEMPERATURE, -1),
        F.log_softmax(t[keep] / base.TEMPERATURE, -1),
        log_target=True,
        reduction="sum",
    )
    return (1 - base.ALPHA) * ce + base.ALPHA * base.TEMPERATURE**2 * kl, keep.sum()


task = dataclasses.replace(base.make(build), loss=loss)
