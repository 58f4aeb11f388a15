"""Broken twin of the DPO task: the reference is copied from the policy but never frozen, so the optimizer trains
it too and the KL anchor moves with the policy. ``Task.trainable`` says only the policy should train: the
backward gate must name the reference's parameters."""

from __future__ import annotations

import copy
from typing import Any

from tests.shelf import dpo_task as base
from tests.shelf.distill_task import gpt2


def build(params: dict[str, Any]) -> base.Policy:
    policy = gpt2(32, 2)
    return base.Policy(policy, copy.deepcopy(policy))  # requires_grad_(False) forgotten


task = base.make(build)
