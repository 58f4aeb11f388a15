"""A Hugging Face user's task: a BERT sequence classifier (tiny, random init) with its encoder frozen.

``build_model`` freezes the embeddings and the encoder (``requires_grad = False``)
so only the pooler and the classifier head train, and ``Task.trainable`` says the same.
A random encoder at BERT's default init (std 0.02) gives every sentence nearly the
same [CLS] features, which no head can separate; ``initializer_range = 0.2`` stands
in for the varied features a pretrained encoder has. The loss is the
model's own (``BertForSequenceClassification(..., labels=...).loss``), dropout
is left at BERT's default.
"""

from __future__ import annotations

import random
import re
from typing import Any

import torch
from transformers import BertConfig, BertForSequenceClassification

from cockpit.pilot.task import Task
from tests.shelf.text import corpus

LABELS = ["short", "medium", "long"]
WORDS = sorted({w for w in re.findall(r"[a-z]{2,10}", corpus())})
STOI = {w: i + 2 for i, w in enumerate(WORDS)}  # 0 padding, 1 [CLS]
VOCAB = len(WORDS) + 2


def _label(words: list[str]) -> int:
    mean = sum(len(w) for w in words) / len(words)
    return 0 if mean < 4.5 else (1 if mean < 6 else 2)


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(int(params.get("data_seed", 0)))
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", int(params.get("train_examples", 256))), ("val", int(params.get("val_examples", 48)))):
        for i in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
            y = _label(words)
            out[split].append(
                {"id": f"{split}-{i:04d}", "group": f"{split}-{i:04d}", "words": words, "label": LABELS[y]}
            )
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    limit = int(params.get("max_length", 16))
    rows = [[1] + [STOI[w] for w in e["words"]][: limit - 1] for e in examples]
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    labels = torch.tensor([LABELS.index(e["label"]) for e in examples])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "ids": [e["id"] for e in examples]}


def build_model(params: dict[str, Any]) -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=int(params.get("hidden", 32)),
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        initializer_range=0.2,
    )
    model = BertForSequenceClassification(config)
    if params.get("freeze_encoder", True):  # the encoder is frozen; the pooler and the classifier train
        for p in [*model.bert.embeddings.parameters(), *model.bert.encoder.parameters()]:
            p.requires_grad = False
    return model


def loss(model: BertForSequenceClassification, batch: dict[str, Any]) -> Any:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])


def head_only(model: BertForSequenceClassification) -> list[str]:
    return [n for n, _ in model.named_parameters() if n.startswith(("classifier.", "bert.pooler."))]


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=LABELS,
    trainable=head_only,
    max_length=lambda params: int(params.get("max_length", 16)),
    length=lambda e: len(e["words"]) + 1,
    group_unit="sentence",
)
