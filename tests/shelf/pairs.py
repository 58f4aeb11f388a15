"""Instruction -> answer pairs for the causal LMs, made from words of real text (the standard library's source)."""

from __future__ import annotations

import random
import re
from typing import Any

from tests.shelf.text import corpus

OPS = ("reverse", "upper", "sort", "first")


def _answer(op: str, word: str) -> str:
    if op == "reverse":
        return word[::-1]
    if op == "upper":
        return word.upper()
    if op == "sort":
        return "".join(sorted(word))
    return word[0]


def pairs(n_train: int, n_val: int, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    words = sorted({w for w in re.findall(r"[a-z]{3,9}", corpus())})
    rng = random.Random(seed)
    combos = [(op, w) for op in OPS for w in words]
    rng.shuffle(combos)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for i, (op, w) in enumerate(combos[: n_train + n_val]):
        split = "train" if i < n_train else "val"
        out[split].append(
            {"id": f"{split}-{i:05d}", "group": f"{op}-{w}", "prompt": f"{op} {w}:", "answer": f" {_answer(op, w)}"}
        )
    return out
