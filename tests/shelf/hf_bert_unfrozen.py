"""Broken twin of the BERT task: ``Task.trainable`` says only the head trains, but ``build_model`` forgot
to freeze the encoder, so the whole encoder would be trained anyway. The backward gate must fail, naming it."""

from __future__ import annotations

from typing import Any

from cockpit.pilot.task import Task
from tests.shelf import hf_bert_task as base


def build_model(params: dict[str, Any]) -> Any:
    return base.build_model({**params, "freeze_encoder": False})


task = Task(
    build_model=build_model,
    datasets=base.datasets,
    collate=base.collate,
    loss=base.loss,
    kind="classification",
    label_names=base.LABELS,
    trainable=base.head_only,
    max_length=lambda params: int(params.get("max_length", 16)),
    length=lambda e: len(e["words"]) + 1,
    group_unit="sentence",
)
