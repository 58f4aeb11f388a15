"""Updates survive the weights' rounding: bf16 weights stepped in place by AdamW at a fine-tuning rate fail; the
same at a pretraining rate, fp32 weights under autocast and a compensated optimizer do not."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cockpit.pilot.phases import rounding
from tests.gates.test_phases import check, classifier, through

NAME = rounding.NAME


class LowPrecision(nn.Module):
    """An MLP whose weights are stored in ``dtype``: its input cast to them, its logits back to fp32."""

    def __init__(self, dtype: torch.dtype, scale: float = 1.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 64), nn.ReLU(), nn.Linear(64, 3))
        with torch.no_grad():  # weights of a pretrained model are larger than a fresh init's
            for p in self.net.parameters():
                p.mul_(scale)
        self.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.to(self.net[0].weight.dtype)).float()


def _gate(dtype: torch.dtype, lr: float, optimizer: Any = None) -> dict[str, Any]:
    kw: dict[str, Any] = {"build_model": lambda p: LowPrecision(dtype, scale=3.0)}
    if optimizer is not None:
        kw["optimizer"] = optimizer
    return check(through(classifier(**kw), "update_first", params={"lr": lr})["update_first"], NAME)


def test_bf16_weights_stepped_by_adamw_at_a_fine_tuning_rate_fail_naming_the_cast() -> None:
    c = _gate(torch.bfloat16, 2e-5)
    assert not c["ok"] and not c.get("warn"), c
    assert "stored in bfloat16" in c["detail"] and "rounds back to the same weight" in c["detail"], c["detail"]
    assert "test_rounding.py:" in c["detail"] and "bf16_stochastic_round" in c["detail"], c["detail"]


def test_the_same_weights_at_a_pretraining_rate_and_fp32_weights_pass() -> None:
    c = _gate(torch.bfloat16, 1e-2)
    assert c["ok"], c
    n = _gate(torch.float32, 2e-5)
    assert n.get("na") and "fp32" in n["detail"], n


def test_sgd_is_bounded_by_its_gradients_and_an_unknown_optimizer_is_not_applicable() -> None:
    sgd = _gate(torch.bfloat16, 1e-6, optimizer=lambda m, p: torch.optim.SGD(m.parameters(), lr=1e-6))
    assert not sgd["ok"] and "the rate times the gradient" in sgd["detail"], sgd
    ada = _gate(torch.bfloat16, 1e-6, optimizer=lambda m, p: torch.optim.Adagrad(m.parameters(), lr=1e-6))
    assert ada.get("na") and "Adagrad" in ada["detail"], ada


def test_half_spacing_is_where_an_added_step_starts_to_move_the_weight() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        w = torch.tensor([0.05, 1.0, -3.0, 1e-3, 0.3]).to(dtype).float()
        half = rounding.half_spacing(w, dtype)
        assert torch.equal((w + 0.9 * half * w.sign()).to(dtype).float(), w), dtype  # rounds back
        assert not torch.equal((w + 1.1 * half * w.sign()).to(dtype).float(), w), dtype
        assert ((w + 1.1 * half * w.sign()).to(dtype).float() != w).all(), dtype
