"""A contrastive dual encoder: Hugging Face CLIP (tiny, random init) with its own symmetric InfoNCE loss over
in-batch negatives (``return_loss=True``) and its learned temperature. Each example pairs an image with its
caption; nothing here has a ``labels`` field: the targets are the batch's own pairing.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import CLIPConfig, CLIPModel

from cockpit.pilot.task import Task
from tests.shelf.synthetic import EOS, PAD, VOCAB, encode, generator, pad, split

IMAGE = 8
COLOURS = ("red", "green", "blue", "grey")
SHAPES = ("bar", "dot", "box", "ring", "cross", "line")


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def make(i: int) -> dict[str, Any]:
        colour, shape = COLOURS[i % 4], SHAPES[(i // 4) % 6]
        img = 0.2 * torch.randn(3, IMAGE, IMAGE, generator=generator(i, 3))
        img[i % 3] += 1.0  # the colour channel
        img[:, (i // 4) % 6] += 1.0  # the shape's row
        return {"image": img.tolist(), "caption": f"a {colour} {shape} {i}"}

    return split(int(params.get("train_examples", 48)), int(params.get("val_examples", 16)), make)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    # CLIP's text tower pools the hidden state at the end-of-text token, which its tokenizer appends to every caption
    ids = pad([encode(e["caption"]) + [EOS] for e in examples], PAD)
    pixels = torch.tensor([e["image"] for e in examples], dtype=torch.float32)
    return {"input_ids": ids, "attention_mask": (ids != PAD).long(), "pixel_values": pixels}


def build_model(params: dict[str, Any]) -> CLIPModel:
    config = CLIPConfig(
        text_config={
            "vocab_size": VOCAB,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 32,
            "pad_token_id": PAD,
            "bos_token_id": 1,
            "eos_token_id": 1,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": IMAGE,
            "patch_size": 4,
            "num_channels": 3,
        },
        projection_dim=16,
    )
    return CLIPModel(config)


def loss(model: CLIPModel, batch: dict[str, Any]) -> torch.Tensor:
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        pixel_values=batch["pixel_values"],
        return_loss=True,
    )
    return out.loss


def make(collate_fn: Any = collate) -> Task:
    return Task(build_model=build_model, datasets=datasets, collate=collate_fn, loss=loss, kind="other")


task = make()
