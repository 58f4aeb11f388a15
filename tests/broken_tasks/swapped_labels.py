"""Label mapping bugs in the classifier: a swapped mapping, one built per split, a
mapping that is not one-to-one, and off-by-one targets out of range."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from cockpit.tasks import classifier as c


def _collate_with(mapping: dict[str, int]):
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        batch = c.collate(examples, params)
        batch["labels"] = torch.tensor([mapping[ex["label"]] for ex in examples], dtype=torch.long)
        return batch

    return collate


# The collate's mapping swaps two classes relative to label_names.
SWAPPED = dict(c.LABEL_IDS, sports=c.LABEL_IDS["weather"], weather=c.LABEL_IDS["sports"])
task = replace(c.task, collate=_collate_with(SWAPPED), name="swapped_labels")

# Two label names collapsed onto one id.
MERGED = dict(c.LABEL_IDS, food=c.LABEL_IDS["music"])
merged = replace(c.task, collate=_collate_with(MERGED), name="merged_labels")

# Ids counted from 1: the last class gets id 4 with 4 classes.
ONE_BASED = {k: v + 1 for k, v in c.LABEL_IDS.items()}
one_based = replace(c.task, collate=_collate_with(ONE_BASED), name="one_based_labels")


# Each split builds its mapping from the labels it contains (sorted): the
# validation split has no "food" example, so every id there shifts by one.
def _per_split_datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    data = c.datasets(params)
    data["val"] = [e for e in data["val"] if e["label"] != "food"]
    for split in data.values():
        names = sorted({e["label"] for e in split})
        for e in split:
            e["target"] = names.index(e["label"])
    return data


def _collate_target(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    batch = c.collate(examples, params)
    batch["labels"] = torch.tensor([ex["target"] for ex in examples], dtype=torch.long)
    return batch


def _names_by_split(params: dict[str, Any]) -> dict[str, list[str]]:
    return {name: sorted({e["label"] for e in split}) for name, split in _per_split_datasets(params).items()}


per_split = replace(
    c.task,
    datasets=_per_split_datasets,
    collate=_collate_target,
    label_names=sorted(c.LABEL_NAMES),
    name="per_split_labels",
    extras={"label_field": "label", "label_names_by_split": _names_by_split},
)
