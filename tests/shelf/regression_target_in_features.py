"""Broken twin of the regression task: the feature matrix is built from every column of the example, the target
included (the classic tabular leak: the target column not dropped from the frame). The loss falls to nearly
zero and validation agrees, since the target is in its features too. The data gate must find the column and
measure that the model reads it."""

from __future__ import annotations

from typing import Any

import torch

from tests.shelf import regression_task as base


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = base.collate(examples, params)
    y = batch["labels"]
    batch["features"] = torch.cat([batch["features"][:, :-1], y], 1)  # the last feature column is the target
    return batch


task = base.make(collate)
