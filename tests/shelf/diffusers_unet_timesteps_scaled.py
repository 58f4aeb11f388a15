"""Broken twin of the diffusion task: the loss hands the UNet its timesteps divided by 1000 (the "continuous time"
of a 1000-step codebase the user copied from), while diffusers' ``UNet2DModel`` embeds the integer step as its
scheduler counts it. Nothing fails: the noise is still added at the right step, but the model barely sees
which step that was, so it learns one denoiser for every noise level. The data gate must name the timestep."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from diffusers import UNet2DModel

from cockpit.pilot.task import Task
from tests.shelf import diffusers_unet_task as base


def loss(model: UNet2DModel, batch: dict[str, Any]) -> torch.Tensor:
    clean = batch["images"]
    noise = torch.randn_like(clean)
    t = torch.randint(0, base.SCHEDULER.config.num_train_timesteps, (clean.shape[0],), device=clean.device)
    noisy = base.SCHEDULER.add_noise(clean, noise, t)
    return F.mse_loss(model(noisy, t / 1000).sample, noise)


task = Task(
    build_model=base.build_model,
    datasets=base.datasets,
    collate=base.collate,
    loss=loss,
    kind="other",
    input_key="images",
)
