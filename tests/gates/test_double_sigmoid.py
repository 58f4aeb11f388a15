"""A multi-label model that ends in a sigmoid under binary_cross_entropy_with_logits is a double sigmoid, named at
the forward gate; the same model returning logits passes with the form recorded."""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.phases import lossinit, objective
from cockpit.pilot.task import Task
from tests.gates.test_phases import check, through


def _data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 48), ("val", 8)):
        for i in range(n):
            x = [rng.gauss(0, 1) for _ in range(6)]
            out[split].append({"id": f"{split}{i}", "x": x, "tags": [float(x[0] > 0), float(x[1] > 0.5), 0.0]})
    return out


def _collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {
        "x": torch.tensor([e["x"] for e in examples]),
        "labels": torch.tensor([e["tags"] for e in examples]),
        "ids": [e["id"] for e in examples],
    }


def _loss(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(m(b["x"]), b["labels"])


def _task(sigmoid: bool) -> Task:
    def build(params: dict[str, Any]) -> nn.Module:
        layers: list[nn.Module] = [nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)]
        return nn.Sequential(*layers, *([nn.Sigmoid()] if sigmoid else []))

    return Task(
        build_model=build,
        datasets=_data,
        collate=_collate,
        loss=_loss,
        kind="classification",
        label_names=["a", "b", "c"],
        input_key="x",
    )


def test_a_sigmoid_under_bce_with_logits_fails_naming_the_loss() -> None:
    c = check(through(_task(True), "forward")["forward"], lossinit.NAME)
    assert not c["ok"] and not c.get("warn"), c
    assert "a double sigmoid" in c["detail"] and "test_double_sigmoid.py:" in c["detail"], c["detail"]


def test_logits_under_bce_with_logits_pass_with_the_form() -> None:
    c = check(through(_task(False), "forward")["forward"], lossinit.NAME)
    assert c["ok"] and "binary cross-entropy of the logits" in c["detail"], c


def test_a_sigmoid_is_found_through_casts_and_views() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    assert objective.ends_in_sigmoid(torch.sigmoid(x).float().view(2, 6))
    assert not objective.ends_in_sigmoid(x * 2)
    assert not objective.ends_in_sigmoid(torch.sigmoid(x) * 2)
