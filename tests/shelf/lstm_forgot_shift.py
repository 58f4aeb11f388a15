"""Broken twin of the LSTM LM: the collate forgets the shift (``y = x``), so the loss scores each position
against its own input word and the model learns to copy it. The data gate must measure it."""

from __future__ import annotations

from typing import Any

import torch

from tests.shelf import lstm_task as base


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["words"][:-1] for e in examples], dtype=torch.long)
    return {"input_ids": x, "labels": x.clone()}


task = base.make(collate)
