"""A model that samples in its forward by design (a VAE drawing z = mu + eps * sigma in eval too, as PyTorch's own
VAE example does) is deterministic given the RNG: validation says *not applicable* and names the sampling, and the
pilot goes on to save, resume and export. Dropout left on in eval (``F.dropout(..., training=True)``) still fails,
named. (Found by the blind families: the VAE failed "deterministic" and the pilot stopped before save.)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.gates.test_verdicts import check, phases


class Sampler(nn.Module):
    def __init__(self, dropout_on: bool) -> None:
        super().__init__()
        self.enc, self.logvar, self.dec = nn.Linear(6, 2), nn.Linear(6, 2), nn.Linear(2, 6)
        self.dropout_on = dropout_on

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dropout_on:  # dropout hard-wired on: a defect in eval
            return self.dec(F.dropout(self.enc(x) + self.logvar(x), p=0.5, training=True))
        mu, logvar = self.enc(x), self.logvar(x)
        return self.dec(mu + torch.randn_like(mu) * torch.exp(0.5 * logvar))  # sampled in eval too, by design


def data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    g = torch.Generator().manual_seed(0)
    xs = torch.rand(40, 6, generator=g).tolist()
    return {
        "train": [{"id": f"t{i}", "x": x} for i, x in enumerate(xs[:32])],
        "val": [{"id": f"v{i}", "x": x} for i, x in enumerate(xs[32:])],
    }


def task(dropout_on: bool) -> Task:
    return Task(
        build_model=lambda p: Sampler(dropout_on),
        datasets=data,
        collate=lambda ex, p: {"x": torch.tensor([e["x"] for e in ex])},
        loss=lambda m, b: F.mse_loss(m(b["x"]), b["x"]),
        input_key="x",
    )


def test_sampling_in_forward_is_deterministic_given_the_rng_and_the_pilot_goes_on() -> None:
    gates = phases(task(dropout_on=False), "export", {"accumulation": 1}, {"overfit_steps": 20})
    v = gates["validation"]
    c = check(v, "deterministic")
    assert c["ok"] and c.get("na"), v.checks
    assert "samples in eval mode" in c["detail"] and "randn_like" in c["detail"], c["detail"]
    assert v.verdict.value == "pass", v.checks
    assert gates["export"].verdict.value == "pass", gates["export"].checks


def test_dropout_left_on_in_eval_still_fails_named() -> None:
    v = phases(task(dropout_on=True), "validation", {"accumulation": 1}, {"overfit_steps": 20})["validation"]
    c = check(v, "deterministic")
    assert not c["ok"] and not c.get("warn"), v.checks
    assert "dropout(training=True)" in c["detail"], c["detail"]
