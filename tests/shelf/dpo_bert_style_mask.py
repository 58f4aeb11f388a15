"""Broken twin of the DPO task: the policy is handed its padding mask in the 4D layout a BERT tutorial builds
(``mask[:, None, None, :]``). Hugging Face's GPT-2 takes a 4D mask as the whole attention pattern, in place of
its causal one, so every position sees the tokens after it, the very answer tokens whose log-probabilities the
preference loss compares. The task is ``kind = "other"``, so the decoder checks of a language model do not
apply; the data gate must measure that each output reads the token it is scored against."""

from __future__ import annotations

import torch

from tests.shelf import dpo_task as base


class Policy(base.Policy):
    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        extended = mask[:, None, None, :].bool().expand(-1, 1, ids.shape[1], -1)
        return self.policy(input_ids=ids, attention_mask=extended).logits


def build_model(params: dict) -> Policy:  # type: ignore[type-arg]
    made = base.build_model(params)
    return Policy(made.policy, made.reference)


task = base.make(build_model)
