"""Broken twin of the nanoGPT task: one example per paragraph, padded with -1, and the model's mean loss.

Paragraphs have different lengths, so each microbatch counts a different number
of targets; ``GPT.forward`` averages over each microbatch's own targets, and an
accumulated update then weighs every microbatch the same whatever its size.
The accumulation gate must fail and say so.
"""

from __future__ import annotations

from typing import Any

import torch

from cockpit.pilot.task import Task
from tests.shelf import nanogpt_task as base


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    t = int(params.get("block_size", 64))
    paragraphs = [p for p in base.TEXT.split("\n\n") if len(p) >= 8]
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    cut = int(len(paragraphs) * 0.9)
    for i, p in enumerate(paragraphs):
        toks = [base.STOI[c] for c in p[: t + 1]]
        out["train" if i < cut else "val"].append({"id": f"p{i:04d}", "group": f"p{i:04d}", "tokens": toks})
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    width = max(len(e["tokens"]) for e in examples) - 1
    x = torch.zeros((len(examples), width), dtype=torch.long)
    y = torch.full((len(examples), width), -1, dtype=torch.long)
    for r, e in enumerate(examples):
        n = len(e["tokens"]) - 1
        x[r, :n] = torch.tensor(e["tokens"][:-1])
        y[r, :n] = torch.tensor(e["tokens"][1:])
    return {"input_ids": x, "labels": y, "ids": [e["id"] for e in examples]}


task = Task(
    build_model=base.build_model,
    datasets=datasets,
    collate=collate,
    loss=base.loss,
    kind="generation",
    ignore_index=-1,
    label_convention="aligned",
    vocab_size=lambda params: base.VOCAB,
    max_length=lambda params: int(params.get("block_size", 64)),
    length=lambda example: len(example["tokens"]) - 1,
    optimizer=base.optimizer,
    group_unit="paragraph",
)
