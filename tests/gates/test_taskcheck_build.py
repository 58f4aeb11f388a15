"""``cockpit check`` builds the model and makes one batch (issue 36, item 3): on the meta device when it can, at its
real size when it is small or cannot be built on meta, and what raises is the task's, at the task's line."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from cockpit import blame
from cockpit.pilot import taskcheck
from tests.gates.test_phases import PARAMS, classifier

TRAIN = classifier().datasets(PARAMS)["train"]
PARAMETERS = 6 * 32 + 32 + 32 * 3 + 3


def test_a_small_model_is_built_at_its_real_size_and_one_batch_collated() -> None:
    built = taskcheck.build(classifier(), PARAMS, TRAIN)
    assert built == {
        "parameters": PARAMETERS,
        "trainable": PARAMETERS,
        "device": "cpu",
        "batch": "x (4, 6) float32, labels (4,) int64",
    }


def test_a_large_model_stays_on_the_meta_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(taskcheck, "REAL_SIZE_PARAMETERS", 100)  # this model counts as large
    built: list[torch.device] = []

    def build_model(params: dict[str, Any]) -> nn.Module:
        model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
        built.append(next(model.parameters()).device)
        return model

    out = taskcheck.build(classifier(build_model=build_model), PARAMS, TRAIN)
    assert out["device"] == "meta" and out["parameters"] == PARAMETERS
    assert built == [torch.device("meta")]  # never allocated for real


def test_a_model_that_cannot_be_built_on_meta_is_built_for_real() -> None:
    def build_model(params: dict[str, Any]) -> nn.Module:
        model = nn.Linear(6, 3)
        if model.weight.is_meta:
            raise NotImplementedError("a kernel with no meta implementation")
        return model

    assert taskcheck.build(classifier(build_model=build_model), PARAMS, TRAIN)["device"] == "cpu"


def test_a_build_model_that_raises_is_the_tasks_at_its_line() -> None:
    def build_model(params: dict[str, Any]) -> nn.Module:
        return torch.load("weights/missing.pt")

    with pytest.raises(blame.UserCodeError) as err:
        taskcheck.build(classifier(build_model=build_model), PARAMS, TRAIN)
    assert err.value.where == "build_model" and isinstance(err.value.exc, FileNotFoundError)
    where = blame.of(err.value).where
    assert "test_taskcheck_build.py" in where and "in build_model" in where and "serialization" not in where


def test_a_collate_that_returns_no_mapping_is_the_tasks() -> None:
    with pytest.raises(blame.UserCodeError) as err:
        taskcheck.build(classifier(collate=lambda examples, params: [e["x"] for e in examples]), PARAMS, TRAIN)
    assert err.value.where == "collate"
