"""A diffusion model: ``diffusers``' UNet2DModel (tiny, random init) trained with a DDPMScheduler as diffusers' own
unconditional training example does: draw noise and a timestep per image, add the noise at that timestep,
predict the noise (MSE). The target is drawn inside the loss: the batch has no ``labels``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler, UNet2DModel

from cockpit.pilot.task import Task
from tests.shelf.synthetic import generator, split

SIZE = 8
SCHEDULER = DDPMScheduler(num_train_timesteps=100)


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def make(i: int) -> dict[str, Any]:
        img = torch.zeros(1, SIZE, SIZE)
        img[0, i % SIZE, :] = 1.0  # a bright row
        img[0, :, (i // SIZE) % SIZE] = 1.0  # and a bright column
        img = img * 2 - 1 + 0.05 * torch.randn(1, SIZE, SIZE, generator=generator(i, 5))
        return {"image": img.clamp(-1, 1).tolist()}

    return split(int(params.get("train_examples", 48)), int(params.get("val_examples", 16)), make)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {"images": torch.tensor([e["image"] for e in examples], dtype=torch.float32)}


def build_model(params: dict[str, Any]) -> UNet2DModel:
    return UNet2DModel(
        sample_size=SIZE,
        in_channels=1,
        out_channels=1,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )


def loss(model: UNet2DModel, batch: dict[str, Any]) -> torch.Tensor:
    clean = batch["images"]
    noise = batch["noise"] if "noise" in batch else torch.randn_like(clean)
    t = torch.randint(0, SCHEDULER.config.num_train_timesteps, (clean.shape[0],), device=clean.device)
    noisy = SCHEDULER.add_noise(clean, noise, t)
    return F.mse_loss(model(noisy, t).sample, noise)


def make(collate_fn: Any = collate) -> Task:
    return Task(
        build_model=build_model, datasets=datasets, collate=collate_fn, loss=loss, kind="other", input_key="images"
    )


task = make()
