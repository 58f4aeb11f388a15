"""A nanoGPT user's task: character-level windows of real text, targets pre-shifted, the model's own loss.

``x = data[i : i + T]`` and ``y = data[i + 1 : i + T + 1]`` as nanoGPT's ``get_batch``
makes them, ``ignore_index = -1``, the loss returned by ``GPT.forward`` and the
optimizer from ``GPT.configure_optimizers`` (decay / no-decay groups).
"""

from __future__ import annotations

from typing import Any

import torch

from cockpit.pilot.task import Task
from tests.shelf.nanogpt import GPT, GPTConfig
from tests.shelf.text import corpus, vocabulary

TEXT = corpus()
CHARS = vocabulary(TEXT)
STOI = {c: i for i, c in enumerate(CHARS)}
VOCAB = len(CHARS)
WINDOWS_PER_GROUP = 4  # a "document" of consecutive windows: the leakage unit


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    t = int(params.get("block_size", 64))
    data = [STOI[c] for c in TEXT]
    n = (len(data) - 1) // t
    windows = [data[i * t : i * t + t + 1] for i in range(n)]
    cut = int(n * 0.9) // WINDOWS_PER_GROUP * WINDOWS_PER_GROUP  # at a document boundary: no document in both
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for i, w in enumerate(windows):
        split = "train" if i < cut else "val"
        out[split].append({"id": f"w{i:05d}", "group": f"doc{i // WINDOWS_PER_GROUP:04d}", "tokens": w})
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["tokens"][:-1] for e in examples], dtype=torch.long)
    y = torch.tensor([e["tokens"][1:] for e in examples], dtype=torch.long)
    return {"input_ids": x, "labels": y, "ids": [e["id"] for e in examples]}


def build_model(params: dict[str, Any]) -> GPT:
    return GPT(
        GPTConfig(
            block_size=int(params.get("block_size", 64)),
            vocab_size=VOCAB,
            n_layer=int(params.get("n_layer", 2)),
            n_head=int(params.get("n_head", 2)),
            n_embd=int(params.get("n_embd", 64)),
            dropout=float(params.get("dropout", 0.0)),
        )
    )


def loss(model: GPT, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return model(batch["input_ids"], batch["labels"])  # (logits, loss), as nanoGPT's train.py uses it


def optimizer(model: GPT, params: dict[str, Any]) -> torch.optim.Optimizer:
    device = next(model.parameters()).device.type
    return model.configure_optimizers(float(params.get("weight_decay", 0.1)), float(params["lr"]), (0.9, 0.95), device)


def decode(batch: dict[str, Any], row: int) -> str:
    return "".join(CHARS[i] for i in batch["input_ids"][row].tolist())


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="generation",
    ignore_index=-1,
    label_convention="aligned",
    vocab_size=lambda params: VOCAB,
    max_length=lambda params: int(params.get("block_size", 64)),
    length=lambda example: len(example["tokens"]) - 1,
    optimizer=optimizer,
    decode=decode,
    group_unit="document",
)
