"""A small synthetic classification data set shared by the verdict tasks (three classes from the signs of x)."""

from __future__ import annotations

import random
from typing import Any

import torch

FEATURES = 6


def data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", int(params.get("train_examples", 64))), ("val", int(params.get("val_examples", 16)))):
        for i in range(n):
            x = [rng.gauss(0, 1) for _ in range(FEATURES)]
            out[split].append({"id": f"{split}{i}", "x": x, "y": int(x[0] > 0) + int(x[1] > 0)})
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {"x": torch.tensor([e["x"] for e in examples]), "labels": torch.tensor([e["y"] for e in examples])}
