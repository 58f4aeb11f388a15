"""A contrastive dual encoder (Hugging Face CLIPModel, tiny, random init) trained with ``return_loss=True``.

CLIP's loss scores each image against every text of the batch (in-batch negatives) with a learned temperature
(``logit_scale``): it does not decompose over examples, so accumulating microbatches optimises another objective
than one batch of them all (fewer negatives per row). Each example is a random image and a random caption.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import nn

from cockpit.pilot.task import Task

VOCAB, WIDTH, SIDE = 64, 5, 16


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", int(params.get("train_examples", 64))), ("val", int(params.get("val_examples", 16)))):
        for i in range(n):
            g = torch.Generator().manual_seed(rng.randrange(1 << 30))
            out[split].append(
                {
                    "id": f"{split}{i}",
                    "image": torch.randn(3, SIDE, SIDE, generator=g).tolist(),
                    "text": [2] + [rng.randrange(4, VOCAB) for _ in range(WIDTH - 2)] + [3],
                }
            )
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    ids = torch.tensor([e["text"] for e in examples])
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.tensor([e["image"] for e in examples]),
    }


def build_model(params: dict[str, Any]) -> nn.Module:
    from transformers import CLIPConfig, CLIPModel

    text = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": 16,
        "eos_token_id": 3,
        "bos_token_id": 2,
        "pad_token_id": 0,
    }
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": SIDE,
        "patch_size": 8,
    }
    return CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))


def loss(model: nn.Module, batch: dict[str, Any]) -> Any:
    return model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        pixel_values=batch["pixel_values"],
        return_loss=True,
    )


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="other",
    label_key="none",
)


def _no_eos(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = collate(examples, params)
    batch["input_ids"] = torch.where(batch["input_ids"] == 3, 4, batch["input_ids"])
    return batch


# broken twin: the captions lose their end token, so CLIP pools the first position (the same start token in every
# row): every text embeds alike, the loss falls to ln(batch) (uniform scores) and stays there
no_eos = Task(build_model=build_model, datasets=datasets, collate=_no_eos, loss=loss, kind="other", label_key="none")
