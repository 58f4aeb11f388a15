"""A recurrent word-level LM in the style of PyTorch's word_language_model example: ``torch.nn.LSTM`` over
embeddings, the hidden state carried from one chunk of the sequence to the next (truncated backpropagation: the
state is detached between chunks), targets the next word (``y = x`` shifted by one, ``aligned``).
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf.text import corpus

WORDS = re.findall(r"[A-Za-z_]+", corpus())
VOCAB_WORDS = sorted(set(WORDS))
STOI = {w: i + 1 for i, w in enumerate(VOCAB_WORDS)}  # 0 is padding
VOCAB = len(VOCAB_WORDS) + 1
T = 24  # words per example
BPTT = 8  # words per chunk: the state crosses chunks, the gradient does not


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    ids = [STOI[w] for w in WORDS]
    n_train, n_val = int(params.get("train_examples", 48)), int(params.get("val_examples", 16))
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for i in range(n_train + n_val):
        name = "train" if i < n_train else "val"
        out[name].append({"id": f"{name}-{i:04d}", "group": f"doc{i // 4:03d}", "words": ids[i * T : i * T + T + 1]})
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["words"][:-1] for e in examples], dtype=torch.long)
    y = torch.tensor([e["words"][1:] for e in examples], dtype=torch.long)
    return {"input_ids": x, "labels": y}


class RNNModel(nn.Module):
    def __init__(self, vocab: int, emb: int = 32, hidden: int = 48, layers: int = 2) -> None:
        super().__init__()
        self.encoder = nn.Embedding(vocab, emb)
        self.rnn = nn.LSTM(emb, hidden, layers, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = None
        outs = []
        for start in range(0, x.shape[1], BPTT):
            if state is not None:
                state = tuple(s.detach() for s in state)  # repackage_hidden: carry the state, not the graph
            out, state = self.rnn(self.encoder(x[:, start : start + BPTT]), state)
            outs.append(out)
        return self.decoder(torch.cat(outs, 1))


def loss(model: RNNModel, batch: dict[str, Any]) -> torch.Tensor:
    logits = model(batch["input_ids"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1))


def make(collate_fn: Any = collate) -> Task:
    return Task(
        build_model=lambda params: RNNModel(VOCAB),
        datasets=datasets,
        collate=collate_fn,
        loss=loss,
        kind="generation",
        label_convention="aligned",
        vocab_size=lambda params: VOCAB,
        group_unit="document",
    )


task = make()
