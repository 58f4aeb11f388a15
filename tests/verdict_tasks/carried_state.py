"""A recurrent language model that carries its hidden state from one batch to the next (truncated backpropagation
through time, as the PyTorch word-language-model example trains): the state lives on the module, detached."""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task

VOCAB, WIDTH = 16, 8


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 64), ("val", 16)):
        for i in range(n):
            start = rng.randrange(VOCAB)
            out[split].append({"id": f"{split}{i}", "toks": [(start + 3 * k) % VOCAB for k in range(WIDTH + 1)]})
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    t = torch.tensor([e["toks"] for e in examples])
    return {"input_ids": t[:, :-1], "labels": t[:, 1:]}


class CarriedLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.rnn = nn.LSTM(16, 32, batch_first=True)
        self.out = nn.Linear(32, VOCAB)
        self.hidden: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.hidden
        if h is not None and h[0].shape[1] != ids.shape[0]:
            h = None  # a batch of another size starts afresh
        y, (a, b) = self.rnn(self.emb(ids), h)
        self.hidden = (a.detach(), b.detach())  # carried to the next batch
        return self.out(y)


def loss(model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(batch["input_ids"])
    return F.cross_entropy(logits.reshape(-1, VOCAB), batch["labels"].reshape(-1), reduction="sum"), batch[
        "labels"
    ].new_tensor(batch["labels"].numel())


task = Task(
    build_model=lambda params: CarriedLSTM(),
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="generation",
    vocab_size=lambda params: VOCAB,
)
