"""Multi-label text classification the transformers way: BertForSequenceClassification (tiny, random init) with
``problem_type="multi_label_classification"``, so the model's own loss is BCEWithLogits over float multi-hot
labels. A sentence is tagged with every property its words have (a long word, a word with a 'z', 'x' or 'q',
a repeated word)."""

from __future__ import annotations

import random
import re
from typing import Any

import torch
from transformers import BertConfig, BertForSequenceClassification

from cockpit.pilot.task import Task
from tests.shelf.text import corpus

TAGS = ["long_word", "rare_letter", "repeat"]
WORDS = sorted({w for w in re.findall(r"[a-z]{2,10}", corpus())})
STOI = {w: i + 2 for i, w in enumerate(WORDS)}  # 0 padding, 1 [CLS]
VOCAB = len(WORDS) + 2


def tags(words: list[str]) -> list[float]:
    return [
        float(any(len(w) >= 9 for w in words)),
        float(any(c in w for w in words for c in "zxq")),
        float(len(set(words)) < len(words)),
    ]


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(int(params.get("data_seed", 0)))
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 192), ("val", 48)):
        for i in range(n):
            words = [rng.choice(WORDS[:300]) for _ in range(rng.randint(3, 9))]
            out[split].append({"id": f"{split}-{i:04d}", "words": words, "tags": tags(words)})
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    rows = [[1] + [STOI[w] for w in e["words"]][:15] for e in examples]
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    labels = torch.tensor([e["tags"] for e in examples], dtype=torch.float32)
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": labels}


def build_model(params: dict[str, Any]) -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=len(TAGS),
        id2label=dict(enumerate(TAGS)),
        label2id={t: i for i, t in enumerate(TAGS)},
        problem_type="multi_label_classification",
    )
    return BertForSequenceClassification(config)


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    kind="classification",
    label_names=TAGS,
    max_length=lambda params: 16,
    length=lambda e: len(e["words"]) + 1,
    group_unit="sentence",
)
