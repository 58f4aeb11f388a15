"""A Cockpit task whose weights and gradients fit on the GPU and whose AdamW state does not: one wide embedding
table (nn.Embedding's gradient is dense, the whole table's) read a few rows at a time, so the forward and
backward passes are cheap and the first optimizer step, which allocates AdamW's two moments, runs out of memory.
bench/gpu_check.py sizes it from the GPU's memory ([task.params] rows x width, fp32).

The table is built on the GPU directly (a host copy of tens of GB would take longer than the check has).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.contract import Batch, Example, Params
from cockpit.pilot.task import Task


class Wide(nn.Module):
    def __init__(self, rows: int, width: int):
        super().__init__()
        self.table = nn.Embedding(rows, width)
        self.head = nn.Linear(width, 1)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.table(idx).mean(1)).squeeze(-1)


def build_model(p: Params) -> nn.Module:
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        return Wide(int(p["rows"]), int(p["width"]))


def datasets(p: Params) -> dict[str, list[Example]]:
    g = torch.Generator().manual_seed(0)

    def split(n: int, tag: str) -> list[Example]:
        idx = torch.randint(0, int(p["rows"]), (n, 8), generator=g)
        return [
            {"id": f"{tag}{i}", "idx": row.tolist(), "y": float(row.float().mean() / int(p["rows"]))}
            for i, row in enumerate(idx)
        ]

    return {"train": split(64, "t"), "val": split(16, "v")}


def collate(examples: list[Example], p: Params) -> Batch:
    return {"idx": torch.tensor([e["idx"] for e in examples]), "labels": torch.tensor([e["y"] for e in examples])}


def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    return F.mse_loss(model(batch["idx"]), batch["labels"])


task = Task(build_model=build_model, datasets=datasets, collate=collate, loss=loss, input_key="idx", mask_key="none")
