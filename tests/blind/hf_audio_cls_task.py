"""An audio classifier: Hugging Face Wav2Vec2ForSequenceClassification (tiny, random init) on 0.1 s clips of a
tone in noise, classed by pitch; raw waveforms of different lengths padded with zeros, an attention mask over
the samples, one label per clip."""

from __future__ import annotations

import math
from typing import Any

import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForSequenceClassification

from cockpit.pilot.task import Task
from tests.shelf.synthetic import generator, split

RATE = 4000
LABELS = ["low", "mid", "high"]
PITCH = [150.0, 400.0, 1000.0]


def clip(i: int) -> dict[str, Any]:
    g = generator(i, 67)
    n = int(RATE * (0.06 + 0.04 * float(torch.rand(1, generator=g))))
    t = torch.arange(n) / RATE
    phase = 2 * math.pi * float(torch.rand(1, generator=g))
    wave = torch.sin(2 * math.pi * PITCH[i % 3] * t + phase) + 0.2 * torch.randn(n, generator=g)
    return {"audio": wave.tolist(), "label": LABELS[i % 3]}


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(int(params.get("train_examples", 48)), int(params.get("val_examples", 15)), clip)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    width = max(len(e["audio"]) for e in examples)
    values = torch.zeros(len(examples), width)
    mask = torch.zeros(len(examples), width, dtype=torch.long)
    for r, e in enumerate(examples):
        values[r, : len(e["audio"])] = torch.tensor(e["audio"])
        mask[r, : len(e["audio"])] = 1
    labels = torch.tensor([LABELS.index(e["label"]) for e in examples])
    return {"input_values": values, "attention_mask": mask, "labels": labels}


def build_model(params: dict[str, Any]) -> Wav2Vec2ForSequenceClassification:
    config = Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16, 16),
        conv_stride=(5, 4, 2),
        conv_kernel=(10, 8, 4),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        mask_time_prob=0.0,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        layerdrop=0.0,
        classifier_proj_size=16,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
    )
    return Wav2Vec2ForSequenceClassification(config)


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    kind="classification",
    label_names=LABELS,
    input_key="input_values",
    group_unit="clip",
)
