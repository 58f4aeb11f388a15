"""A vision transformer: Hugging Face ViTForImageClassification (tiny, random init) on 8x8 images whose class is a
pattern (a bright row, column, diagonal or border), with label names as a user's dataset gives them."""

from __future__ import annotations

from typing import Any

import torch
from transformers import ViTConfig, ViTForImageClassification

from cockpit.pilot.task import Task
from tests.shelf.synthetic import generator, split

SIZE = 8
LABELS = ["row", "column", "diagonal", "border"]


def image(kind: str, i: int) -> torch.Tensor:
    img = 0.3 * torch.randn(3, SIZE, SIZE, generator=generator(i, 13))
    k = i % SIZE
    if kind == "row":
        img[:, k, :] += 1.5
    elif kind == "column":
        img[:, :, k] += 1.5
    elif kind == "diagonal":
        img += 1.5 * torch.eye(SIZE).roll(k, 1)
    else:
        img[:, [0, -1], :] += 1.5
        img[:, :, [0, -1]] += 1.5
    return img


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def make(i: int) -> dict[str, Any]:
        name = LABELS[i % len(LABELS)]
        return {"image": image(name, i).tolist(), "label": name}

    return split(int(params.get("train_examples", 48)), int(params.get("val_examples", 16)), make)


def collate_with(names: list[str]) -> Any:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        pixels = torch.tensor([e["image"] for e in examples], dtype=torch.float32)
        return {"pixel_values": pixels, "labels": torch.tensor([names.index(e["label"]) for e in examples])}

    return collate


def build_model(params: dict[str, Any]) -> ViTForImageClassification:
    config = ViTConfig(
        image_size=SIZE,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=len(LABELS),
    )
    return ViTForImageClassification(config)


def make(names: list[str]) -> Task:
    return Task(
        build_model=build_model,
        datasets=datasets,
        collate=collate_with(names),
        kind="classification",
        label_names=LABELS,
        input_key="pixel_values",
        group_unit="image",
    )


task = make(LABELS)
