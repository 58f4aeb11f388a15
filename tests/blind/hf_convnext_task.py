"""A ConvNeXt image classifier: Hugging Face ConvNextForImageClassification (tiny, random init) with stochastic
depth (``drop_path_rate=0.2``: whole residual blocks dropped at random in training, as timm does), on the
shelf's 8x8 pattern images (row, column, diagonal, border)."""

from __future__ import annotations

from typing import Any

from transformers import ConvNextConfig, ConvNextForImageClassification

from cockpit.pilot.task import Task
from tests.shelf.hf_vit_task import LABELS, collate_with, datasets


def build_model(params: dict[str, Any]) -> ConvNextForImageClassification:
    config = ConvNextConfig(
        num_channels=3,
        patch_size=2,
        num_stages=2,
        hidden_sizes=[16, 32],
        depths=[2, 2],
        drop_path_rate=float(params.get("drop_path_rate", 0.2)),
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
    )
    return ConvNextForImageClassification(config)


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate_with(LABELS),
    kind="classification",
    label_names=LABELS,
    input_key="pixel_values",
    group_unit="image",
)
