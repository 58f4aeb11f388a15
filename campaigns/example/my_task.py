"""A complete task file: a small model and dataset you already have, put under Cockpit.

Referenced from campaign.toml as  entry = "my_task.py:task"  (a path relative to the
campaign folder, or a module path such as "mypackage.tasks:task").
"""

import random

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task

LABELS = ["low", "mid", "high"]  # label names; the target id is the index


def datasets(params):
    """Examples are dicts with a unique "id" and a leakage "group" (here: the sensor that
    produced them); a sensor's readings all go to one split, so nothing leaks."""
    rng = random.Random(params.get("data_seed", 0))
    splits = {"train": [], "val": [], "test": []}
    for sensor in range(60):
        split = "train" if sensor < 40 else ("val" if sensor < 50 else "test")
        for k in range(8):
            x = [rng.gauss(0, 1) for _ in range(params["features"])]
            level = min(2, max(0, int(sum(x[:3]) // 1.2 + 1)))
            splits[split].append({"id": f"s{sensor:03d}-{k}", "group": f"sensor{sensor:03d}", "x": x, "y": level})
    return splits


def collate(examples, params):
    return {
        "x": torch.tensor([e["x"] for e in examples], dtype=torch.float32),
        "labels": torch.tensor([e["y"] for e in examples]),
        "ids": [e["id"] for e in examples],
    }


def build_model(params):
    return nn.Sequential(nn.Linear(params["features"], params["hidden"]), nn.ReLU(), nn.Linear(params["hidden"], len(LABELS)))


def loss(model, batch):
    # (sum, count): Cockpit divides by the count over the whole accumulated update
    logits = model(batch["x"])
    return F.cross_entropy(logits, batch["labels"], reduction="sum"), batch["labels"].numel()


def predict(model, batch):
    return model(batch["x"]).argmax(-1)


def decode(batch, row):
    return f"x[:3]={[round(v, 2) for v in batch['x'][row, :3].tolist()]} -> {LABELS[int(batch['labels'][row])]}"


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=LABELS,
    predict=predict,
    decode=decode,
    group_unit="sensor",
    control_inputs=lambda params: datasets(params)["test"][:4],  # replayed after export
)
