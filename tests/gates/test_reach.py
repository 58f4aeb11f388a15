"""Predictions read the context: a causal body pooled at its first position, and a language model whose attention
keeps the diagonal only, fail; a causal mask, a pooling at the last text token and a bigram by design do not."""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.phases import reach
from cockpit.pilot.task import Task
from tests.gates.test_phases import VOCAB, _mean, check, lm, through

NAME = reach.NAME


class Attending(nn.Module):
    """Embeddings, one attention layer under ``mask`` (True: not allowed), a head per position."""

    def __init__(self, diagonal_only: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.out = nn.Linear(16, VOCAB)
        self.diagonal_only = diagonal_only

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        h = self.emb(ids)
        if self.diagonal_only:  # the mistake: only the position itself allowed
            mask = ~torch.eye(t, dtype=torch.bool)
        else:
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        return self.out(h + a)


def test_a_language_model_whose_attention_keeps_the_diagonal_only_fails() -> None:
    task = lm(build_model=lambda p: Attending(diagonal_only=True), loss=_mean)
    c = check(through(task, "forward")["forward"], NAME)
    assert not c["ok"] and "a bigram model" in c["detail"] and "diagonal" in c["detail"], c
    ok = check(through(lm(build_model=lambda p: Attending(False), loss=_mean), "forward")["forward"], NAME)
    assert ok["ok"], ok


def test_a_bigram_by_design_is_not_applicable() -> None:
    c = check(through(lm(loss=_mean), "forward")["forward"], NAME)
    assert c.get("na") and "bigram" in c["detail"], c


LABELS = ["a", "b"]


def _data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 48), ("val", 8)):
        for i in range(n):
            toks = [1] + [rng.randrange(2, VOCAB) for _ in range(rng.randint(3, 8))]
            out[split].append({"id": f"{split}{i}", "toks": toks, "label": int(sum(toks) % 2)})
    return out


def _collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    width = max(len(e["toks"]) for e in examples)
    ids = torch.zeros((len(examples), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, e in enumerate(examples):
        ids[r, : len(e["toks"])] = torch.tensor(e["toks"])
        mask[r, : len(e["toks"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([e["label"] for e in examples])}


class Recurrent(nn.Module):
    """A unidirectional GRU over the tokens, its state at ``pool`` ("first" or the last text token) classified."""

    def __init__(self, pool: str) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.rnn = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, 2)
        self.pool = pool

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.emb(ids))
        if self.pool == "first":
            return self.head(out[:, 0])
        return self.head(out[torch.arange(ids.shape[0]), mask.sum(1) - 1])


def _cls(pool: str) -> Task:
    return Task(
        build_model=lambda p: Recurrent(pool),
        datasets=_data,
        collate=_collate,
        loss=lambda m, b: F.cross_entropy(m(b["input_ids"], b["attention_mask"]), b["labels"]),
        kind="classification",
        label_names=LABELS,
    )


def test_a_recurrent_classifier_pooled_at_its_first_position_fails_naming_its_forward() -> None:
    c = check(through(_cls("first"), "forward")["forward"], NAME)
    assert not c["ok"] and "reads only the first token" in c["detail"], c
    assert "test_reach.py:" in c["detail"] and "Recurrent.forward" in c["detail"], c["detail"]
    ok = check(through(_cls("last"), "forward")["forward"], NAME)
    assert ok["ok"], ok
