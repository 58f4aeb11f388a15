"""Broken twin of the DPO task: policy and reference keep GPT-2's default dropout (0.1), and the reference, a
frozen ``copy.deepcopy`` of the policy, is put in eval mode once, in ``build_model``. The training loop's
``model.train()`` sets it back to training mode, so its log-probabilities, the anchor of every margin, are random
from call to call (TRL turns dropout off in both models for this reason). The forward gate must name the
reference."""

from __future__ import annotations

import copy
from typing import Any

from transformers import GPT2Config, GPT2LMHeadModel

from tests.shelf import dpo_task as base
from tests.shelf.synthetic import EOS, VOCAB


def build(params: dict[str, Any]) -> base.Policy:
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=EOS, eos_token_id=EOS
    )  # dropout left at GPT-2's defaults (0.1)
    policy = GPT2LMHeadModel(config)
    reference = copy.deepcopy(policy).eval()  # once, here: the training loop's model.train() undoes it
    reference.requires_grad_(False)
    return base.Policy(policy, reference)


task = base.make(build)
