"""A ResNet user's task: transformers' ResNet (ResNet-18's basic blocks, random init, BatchNorm) classifying small random images.

Each image is drawn from a generator seeded by its id; its label is the
quadrant whose red channel is brightest, so the model has something to learn.
The loss is the usual mean cross-entropy over the microbatch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from cockpit.pilot.task import Task

LABELS = ["top-left", "top-right", "bottom-left", "bottom-right"]


def image(seed: int, size: int) -> tuple[torch.Tensor, int]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, size, size, generator=g)
    label = int(torch.randint(0, 4, (1,), generator=g))
    h = size // 2
    r, c = divmod(label, 2)
    x[0, r * h : (r + 1) * h, c * h : (c + 1) * h] += 1.5
    return x, label


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for split, n, base in (
        ("train", int(params.get("train_examples", 128)), 0),
        ("val", int(params.get("val_examples", 32)), 10**6),
    ):
        out[split] = [{"id": f"{split}-{i:04d}", "group": f"{split}-{i:04d}", "seed": base + i} for i in range(n)]
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    size = int(params.get("image_size", 32))
    pairs = [image(e["seed"], size) for e in examples]
    return {
        "pixel_values": torch.stack([x for x, _ in pairs]),
        "labels": torch.tensor([y for _, y in pairs]),
        "ids": [e["id"] for e in examples],
    }


def build_model(params: dict[str, Any]) -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    width = int(params.get("width", 16))
    config = ResNetConfig(
        embedding_size=width,
        hidden_sizes=[width, 2 * width, 4 * width, 8 * width],
        depths=[2, 2, 2, 2],
        layer_type="basic",
        num_labels=len(LABELS),
    )
    return ResNetForImageClassification(config)


def loss(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return F.cross_entropy(model(pixel_values=batch["pixel_values"]).logits, batch["labels"])


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=LABELS,
    input_key="pixel_values",
    group_unit="image",
)
