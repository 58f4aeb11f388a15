"""Token classification (NER-style): Hugging Face DistilBertForTokenClassification (tiny, random init).

Words are split into word pieces of up to three letters (``fun ##cti ##on``); as in the transformers token
classification recipe, a word's tag goes on its first piece and -100 on its other pieces, on [CLS], [SEP] and on
the padding. A word's tag depends on the word: LONG (8+ letters), SHORT (3 letters), O otherwise.
"""

from __future__ import annotations

import random
import re
from typing import Any

import torch
from transformers import DistilBertConfig, DistilBertForTokenClassification

from cockpit.pilot.task import Task
from tests.shelf.text import corpus

TAGS = ["O", "LONG", "SHORT"]
WORDS = sorted({w for w in re.findall(r"[a-z]{3,12}", corpus())})


def pieces(word: str) -> list[str]:
    return [word[:3]] + ["##" + word[i : i + 3] for i in range(3, len(word), 3)]


PIECES = sorted({p for w in WORDS for p in pieces(w)})
STOI = {p: i + 3 for i, p in enumerate(PIECES)}  # 0 [PAD], 1 [CLS], 2 [SEP]
VOCAB = len(PIECES) + 3


def tag(word: str) -> str:
    return "LONG" if len(word) >= 8 else ("SHORT" if len(word) == 3 else "O")


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(int(params.get("data_seed", 0)))
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", int(params.get("train_examples", 128))), ("val", int(params.get("val_examples", 32)))):
        for i in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
            out[split].append(
                {
                    "id": f"{split}-{i:04d}",
                    "group": f"{split}-{i:04d}",
                    "tokens": words,
                    "ner_tags": [tag(w) for w in words],
                }
            )
    return out


def encode(example: dict[str, Any], limit: int, pad_label: int = -100) -> tuple[list[int], list[int]]:
    ids, labels = [1], [-100]
    for word, t in zip(example["tokens"], example["ner_tags"], strict=True):
        ps = pieces(word)
        ids += [STOI[p] for p in ps]
        labels += [TAGS.index(t)] + [-100] * (len(ps) - 1)
    ids, labels = ids[: limit - 1] + [2], labels[: limit - 1] + [-100]
    return ids, labels


def collate_with(pad_label: int) -> Any:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        rows = [encode(e, int(params.get("max_length", 32))) for e in examples]
        width = max(len(ids) for ids, _ in rows)
        input_ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), pad_label, dtype=torch.long)
        for r, (ids, labs) in enumerate(rows):
            input_ids[r, : len(ids)] = torch.tensor(ids)
            mask[r, : len(ids)] = 1
            labels[r, : len(labs)] = torch.tensor(labs)
        return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}

    return collate


def build_model(params: dict[str, Any]) -> DistilBertForTokenClassification:
    config = DistilBertConfig(
        vocab_size=VOCAB,
        dim=32,
        hidden_dim=64,
        n_layers=2,
        n_heads=2,
        max_position_embeddings=64,
        num_labels=len(TAGS),
        id2label=dict(enumerate(TAGS)),
        label2id={t: i for i, t in enumerate(TAGS)},
        pad_token_id=0,
    )
    return DistilBertForTokenClassification(config)


def loss(model: DistilBertForTokenClassification, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    count = (batch["labels"] != -100).sum()
    return out.loss * count, count


def make(collate: Any) -> Task:
    return Task(
        build_model=build_model,
        datasets=datasets,
        collate=collate,
        loss=loss,
        kind="classification",
        label_names=TAGS,
        max_length=lambda params: int(params.get("max_length", 32)),
        length=lambda e: 2 + sum(len(pieces(w)) for w in e["tokens"]),
        group_unit="sentence",
    )


task = make(collate_with(-100))
