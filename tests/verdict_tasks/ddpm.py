"""A DDPM-style denoiser: the loss draws a timestep and Gaussian noise for every image (the training step of
diffusers' own example, written out), so two evaluations of one batch differ unless the RNG state is replayed.

``task`` draws from torch's seeded generator (deterministic given the RNG state); ``own_generator`` draws its
noise from a NumPy generator of its own, seeded from the clock, which no replay of the run's RNG reproduces.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task

SIDE, STEPS = 8, 50
BETAS = torch.linspace(1e-4, 0.2, STEPS)
ALPHA_BAR = torch.cumprod(1 - BETAS, 0)


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 64), ("val", 16)):
        for i in range(n):
            a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
            img = [[a * np.sin(r / 2) + b * np.cos(c / 2) for c in range(SIDE)] for r in range(SIDE)]
            out[split].append({"id": f"{split}{i}", "image": img})
    return out


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {"pixel_values": torch.tensor([[e["image"]] for e in examples], dtype=torch.float32)}


class Denoiser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.time = nn.Embedding(STEPS, 16)
        self.inp = nn.Conv2d(1, 16, 3, padding=1)
        self.mid = nn.Conv2d(16, 16, 3, padding=1)
        self.out = nn.Conv2d(16, 1, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.inp(x) + self.time(t)[:, :, None, None])
        return self.out(F.silu(self.mid(h)))


def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    x = batch["pixel_values"]
    t = torch.randint(0, STEPS, (x.shape[0],), device=x.device)
    noise = torch.randn_like(x)
    ab = ALPHA_BAR.to(x.device)[t][:, None, None, None]
    return F.mse_loss(model(ab.sqrt() * x + (1 - ab).sqrt() * noise, t), noise)


def unseeded_loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    x = batch["pixel_values"]
    gen = np.random.default_rng(time.perf_counter_ns())  # the defect: a generator the run's seed does not control
    t = torch.from_numpy(gen.integers(0, STEPS, x.shape[0])).to(x.device)
    noise = torch.from_numpy(gen.standard_normal(tuple(x.shape)).astype("float32")).to(x.device)
    ab = ALPHA_BAR.to(x.device)[t][:, None, None, None]
    return F.mse_loss(model(ab.sqrt() * x + (1 - ab).sqrt() * noise, t), noise)


task = Task(
    build_model=lambda params: Denoiser(),
    datasets=datasets,
    collate=collate,
    loss=loss,
    input_key="pixel_values",
    mask_key="none",
    label_key="none",
)
own_generator = dataclasses.replace(task, loss=unseeded_loss)
