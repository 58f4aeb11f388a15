"""A variational autoencoder (torch.nn) on 8x8 binary glyphs: the reparameterisation trick, so the objective is
stochastic; the loss is the negative ELBO, reconstruction (Bernoulli, summed over pixels) plus the KL of the
posterior from N(0, I), summed over examples and returned with their count."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf.synthetic import generator, split

SIDE = 8


def glyph(i: int) -> list[float]:
    img = torch.zeros(SIDE, SIDE)
    g = generator(i, 31)
    kind = i % 3
    k = int(torch.randint(0, SIDE, (1,), generator=g))
    if kind == 0:
        img[k, :] = 1
    elif kind == 1:
        img[:, k] = 1
    else:
        img += torch.eye(SIDE).roll(k, 1)
    img = 0.1 + 0.8 * img + 0.1 * torch.rand(SIDE, SIDE, generator=g)  # grey levels in [0, 1]: every glyph its own
    return img.flatten().tolist()


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(int(params.get("train_examples", 96)), int(params.get("val_examples", 24)), lambda i: {"x": glyph(i)})


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {"x": torch.tensor([e["x"] for e in examples])}


class VAE(nn.Module):
    def __init__(self, latent: int = 4, hidden: int = 48, sample_always: bool = False) -> None:
        super().__init__()
        self.sample_always = sample_always  # a VAE whose forward samples z in eval too (the ELBO as written)
        self.enc = nn.Sequential(nn.Linear(SIDE * SIDE, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, SIDE * SIDE))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar) if self.training or self.sample_always else mu
        return self.dec(z), mu, logvar


def build_model(params: dict[str, Any]) -> VAE:
    return VAE(int(params.get("latent", 4)), sample_always=bool(params.get("sample_always", False)))


def kl_term(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    return -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(-1)


def loss_with(kl_sign: float) -> Any:
    def loss(model: VAE, batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
        x = batch["x"]
        logits, mu, logvar = model(x)
        recon = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(-1)
        return (recon + kl_sign * kl_term(mu, logvar)).sum(), x.shape[0]

    return loss


def make(kl_sign: float = 1.0) -> Task:
    return Task(
        build_model=build_model,
        datasets=datasets,
        collate=collate,
        loss=loss_with(kl_sign),
        input_key="x",
        group_unit="glyph",
    )


task = make()
