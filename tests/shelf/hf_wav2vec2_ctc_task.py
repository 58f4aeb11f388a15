"""A CTC speech model: Hugging Face Wav2Vec2ForCTC (tiny, random init) on raw float audio.

Each example is a waveform (a word's own tone pattern plus noise, 320 to 400 samples) and its transcript in
characters; the collate pads the audio with zeros, gives the (batch, samples) attention mask, and pads the
labels with -100 as transformers' CTC examples do. The loss is the model's own CTC loss.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

from cockpit.pilot.task import Task
from tests.shelf.synthetic import generator, split

LETTERS = "_abcdefghijklmnopqrstuvwxyz"  # 0 is CTC's blank (and padding)
WORDS = ("yes", "no", "up", "down", "left", "go")


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def make(i: int) -> dict[str, Any]:
        word = WORDS[i % len(WORDS)]
        n = 320 + (i * 37) % 81
        g = generator(i, 11)
        tones = [math.sin(0.05 * (1 + LETTERS.index(c)) * k) for c in word for k in range(n // len(word) + 1)][:n]
        audio = torch.tensor(tones) + 0.1 * torch.randn(n, generator=g)
        return {"audio": audio.tolist(), "text": word}

    return split(int(params.get("train_examples", 48)), int(params.get("val_examples", 16)), make)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    width = max(len(e["audio"]) for e in examples)
    audio = torch.zeros(len(examples), width)
    mask = torch.zeros(len(examples), width, dtype=torch.long)
    longest = max(len(e["text"]) for e in examples)
    labels = torch.full((len(examples), longest), -100, dtype=torch.long)
    for i, e in enumerate(examples):
        audio[i, : len(e["audio"])] = torch.tensor(e["audio"])
        mask[i, : len(e["audio"])] = 1
        labels[i, : len(e["text"])] = torch.tensor([LETTERS.index(c) for c in e["text"]])
    return {"input_values": audio, "attention_mask": mask, "labels": labels}


def build_model(params: dict[str, Any]) -> Wav2Vec2ForCTC:
    config = Wav2Vec2Config(
        vocab_size=len(LETTERS),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        conv_dim=(8, 8),
        conv_kernel=(10, 3),
        conv_stride=(5, 2),
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        mask_time_prob=0.0,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        final_dropout=0.0,
        layerdrop=0.0,
        pad_token_id=0,
        ctc_loss_reduction="mean",
    )
    return Wav2Vec2ForCTC(config)


def make(collate_fn: Any = collate) -> Task:
    return Task(
        build_model=build_model,
        datasets=datasets,
        collate=collate_fn,
        kind="other",
        input_key="input_values",
        vocab_size=lambda params: len(LETTERS),
        group_unit="recording",
    )


task = make()
