"""Broken twin of the BERT task: the loss calls the model without its ``attention_mask`` (a user who trimmed the
call to ``model(input_ids, labels=...)``), so every sentence shorter than the batch attends to its padding as if
it were text. Nothing fails and the loss falls. The data gate must name the field the model never receives."""

from __future__ import annotations

from typing import Any

from transformers import BertForSequenceClassification

from cockpit.pilot.task import Task
from tests.shelf import hf_bert_task as base


def loss(model: BertForSequenceClassification, batch: dict[str, Any]) -> Any:
    return model(input_ids=batch["input_ids"], labels=batch["labels"])


task = Task(
    build_model=base.build_model,
    datasets=base.datasets,
    collate=base.collate,
    loss=loss,
    kind="classification",
    label_names=base.LABELS,
    trainable=base.head_only,
    max_length=lambda params: int(params.get("max_length", 16)),
    length=lambda e: len(e["words"]) + 1,
    group_unit="sentence",
)
