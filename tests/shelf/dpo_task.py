"""A preference objective with a frozen reference: DPO (Rafailov et al.) on a tiny Hugging Face GPT-2 policy.

Each example is a prompt with a chosen and a rejected answer; the reference is a frozen copy of the policy as
built (``copy.deepcopy``, ``requires_grad_(False)``); the loss is ``-log sigmoid(beta * ((log pi(chosen) -
log ref(chosen)) - (log pi(rejected) - log ref(rejected))))`` over the answers' tokens. The batch has no
``labels``: the targets are the pairs themselves.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf.distill_task import gpt2
from tests.shelf.synthetic import EOS, PAD, encode, pad, text_pairs

BETA = 0.5


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out = text_pairs(params)
    for split in out.values():
        for e in split:
            e["rejected"] = e["answer"][::-1] if len(set(e["answer"])) > 2 else e["answer"] + "x"
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch: dict[str, Any] = {}
    for side, key in (("chosen", "answer"), ("rejected", "rejected")):
        rows = [encode(e["prompt"] + e[key]) + [EOS] for e in examples]
        ids = pad(rows, PAD)
        answer = torch.zeros_like(ids, dtype=torch.bool)
        for r, e in enumerate(examples):
            answer[r, len(e["prompt"]) : len(rows[r])] = True
        batch[f"{side}_ids"], batch[f"{side}_mask"], batch[f"{side}_answer"] = ids, (ids != PAD).long(), answer
    return batch


class Policy(nn.Module):
    def __init__(self, policy: nn.Module, reference: nn.Module) -> None:
        super().__init__()
        self.policy, self.reference = policy, reference

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.policy(input_ids=ids, attention_mask=mask).logits


def build_model(params: dict[str, Any]) -> Policy:
    policy = gpt2(32, 2)
    reference = copy.deepcopy(policy).eval()
    reference.requires_grad_(False)
    return Policy(policy, reference)


def answer_logp(logits: torch.Tensor, ids: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    logp = torch.gather(F.log_softmax(logits[:, :-1].float(), -1), 2, ids[:, 1:, None]).squeeze(2)
    return (logp * answer[:, 1:]).sum(1)


def loss(model: Policy, batch: dict[str, Any]) -> torch.Tensor:
    margins = []
    for side in ("chosen", "rejected"):
        ids, mask, answer = batch[f"{side}_ids"], batch[f"{side}_mask"], batch[f"{side}_answer"]
        with torch.no_grad():
            ref = model.reference(input_ids=ids, attention_mask=mask).logits
        margins.append(answer_logp(model(ids, mask), ids, answer) - answer_logp(ref, ids, answer))
    return -F.logsigmoid(BETA * (margins[0] - margins[1])).mean()


def make(build: Any = build_model) -> Task:
    return Task(
        build_model=build,
        datasets=datasets,
        collate=collate,
        loss=loss,
        kind="other",
        input_key="chosen_ids",
        mask_key="chosen_mask",
        trainable=lambda model: [n for n, _ in model.policy.named_parameters(prefix="policy")],
        group_unit="word",
    )


task = make()
