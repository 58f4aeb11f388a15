"""A convnet with BatchNorm: transformers' own ResNetForImageClassification (tiny, random init) on the ViT task's
pattern images. BatchNorm makes each example's output depend on the rest of its batch in training."""

from __future__ import annotations

from transformers import ResNetConfig, ResNetForImageClassification

from cockpit.pilot.task import Task
from tests.shelf import hf_vit_task as images


def build_model(params: dict) -> ResNetForImageClassification:
    config = ResNetConfig(
        num_channels=3,
        embedding_size=8,
        hidden_sizes=[8, 16],
        depths=[1, 1],
        layer_type="basic",
        downsample_in_first_stage=False,
        num_labels=len(images.LABELS),
    )
    return ResNetForImageClassification(config)


task = Task(
    build_model=build_model,
    datasets=images.datasets,
    collate=images.collate_with(images.LABELS),
    kind="classification",
    label_names=images.LABELS,
    input_key="pixel_values",
    group_unit="image",
)
