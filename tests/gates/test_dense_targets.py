"""Classification targets laid out densely: a class id per position (token tagging with -100 on some positions,
a (B, H, W) segmentation map) or a float multi-hot row (multi-label with BCE). The data gate reads every position:
a healthy task has every class in training, a class truly absent is named, a value out of range at any position
fails. (Found by the blind families: the gate read only each row's first value, so a tagger whose first position
is [CLS] (-100) had "no training example" of any class, and a target out of range past position 0 passed.)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.gates.test_data_measured import check, data_gate, split

NAMES = ["O", "A", "B"]


def tags(i: int) -> dict[str, Any]:
    return {"x": [float((i + k) % 3) for k in range(5)], "tags": [(i + k) % 3 for k in range(5)]}


def tagging(bad_at: int | None = None, classes: int = 3, bad: tuple[int, ...] = (7, 9), ignore: int = -100) -> Any:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        labels = torch.tensor([[ignore] + [t % classes for t in e["tags"]] for e in examples])
        if bad_at is not None:
            labels[:, bad_at] = torch.tensor([bad[i % len(bad)] for i in range(len(examples))])
        x = torch.tensor([[0.0] + e["x"] for e in examples]).unsqueeze(-1)
        return {"x": x, "labels": labels}

    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        logits = model(batch["x"])
        labels = batch["labels"].reshape(-1)
        labels = torch.where((labels > 2) | (labels < 0), torch.full_like(labels, -100), labels)
        return F.cross_entropy(logits.reshape(-1, 3), labels, ignore_index=-100)

    from cockpit.pilot.task import Task

    return Task(
        build_model=lambda p: nn.Linear(1, 3),
        datasets=lambda p: split(16, tags),
        collate=collate,
        loss=loss,
        kind="classification",
        label_names=NAMES,
        ignore_index=ignore,
        input_key="x",
        extras={"measure_targets": False},
    )


def test_per_position_tags_with_minus_100_first_have_every_class_in_train() -> None:
    g, _ = data_gate(tagging())
    c = check(g, "every class in train")
    assert c["ok"], c
    assert "3 classes" in c["detail"]


def test_a_class_absent_from_every_position_is_named() -> None:
    g, _ = data_gate(tagging(classes=2))  # tags 0 and 1 only: "B" never appears
    c = check(g, "every class in train")
    assert not c["ok"] and c.get("warn"), c
    assert "'B'" in c["detail"] and "'O'" not in c["detail"], c


def test_a_target_out_of_range_past_the_first_position_fails() -> None:
    g, _ = data_gate(tagging(bad_at=3))
    c = check(g, "targets in range")
    assert not c["ok"] and not c.get("warn"), c
    assert "target 7" in c["detail"] and "train0" in c["detail"], c


def test_one_constant_outside_the_classes_is_an_undeclared_ignore_value_warned_and_declared_it_passes() -> None:
    g, _ = data_gate(tagging(bad_at=3, bad=(255,)))  # 255 around a mask's objects, the Task declaring -100
    c = check(g, "targets in range")
    assert not c["ok"] and c.get("warn"), c
    assert "Task.ignore_index = 255" in c["detail"], c
    g, _ = data_gate(tagging(bad_at=3, bad=(255,), ignore=255))
    assert check(g, "targets in range")["ok"]


def multi_hot(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(16, lambda i: {"x": [float(i % 5), 1.0], "y": [float((i >> k) & 1) for k in range(3)]})


def test_float_multi_hot_labels_count_each_column_as_a_class() -> None:
    from cockpit.pilot.task import Task

    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        return {"x": torch.tensor([e["x"] for e in examples]), "labels": torch.tensor([e["y"] for e in examples])}

    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(model(batch["x"]), batch["labels"])

    task = Task(
        build_model=lambda p: nn.Linear(2, 3),
        datasets=multi_hot,
        collate=collate,
        loss=loss,
        kind="classification",
        label_names=NAMES,
        input_key="x",
        extras={"measure_targets": False},
    )
    g, _ = data_gate(task)
    c = check(g, "every class in train")
    assert c["ok"], c
    assert check(g, "targets in range")["ok"]
