"""The built-in classifier task: deterministic data split by source, a label mapping both
ways, and a model that learns on a 2-core CPU in seconds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from cockpit import notebook as nbm
from cockpit.pilot.task import load_task
from cockpit.pilot.trainer import Trainer
from cockpit.tasks import classifier as c

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"train_examples": 512, "val_examples": 64, "test_examples": 64}


def test_data_is_deterministic_and_split_by_source() -> None:
    a, b = c.datasets(SMALL), c.datasets(SMALL)
    assert a == b
    assert [len(a[s]) for s in ("train", "val", "test")] == [512, 64, 64]
    ids = [e["id"] for split in a.values() for e in split]
    assert len(ids) == len(set(ids))
    groups = {s: {e["group"] for e in data} for s, data in a.items()}
    assert (
        not (groups["train"] & groups["val"])
        and not (groups["train"] & groups["test"])
        and not (groups["val"] & groups["test"])
    )
    by_source: dict[str, set[str]] = {}
    for e in a["train"]:
        by_source.setdefault(e["group"], set()).add(e["label"])
    assert all(len(v) == 1 for v in by_source.values())  # one topic per source document
    assert len(by_source) == 512 // c.PER_SOURCE
    assert {e["label"] for e in a["train"]} == set(c.LABEL_NAMES)
    assert c.datasets({**SMALL, "data_seed": 8})["train"] != a["train"]


def test_label_mapping_is_one_to_one_both_ways() -> None:
    assert len(set(c.LABEL_NAMES)) == len(c.LABEL_NAMES)
    assert all(c.LABEL_NAMES[c.LABEL_IDS[n]] == n for n in c.LABEL_NAMES)
    assert c.task.label_names == c.LABEL_NAMES and c.task.kind == "classification" and c.task.group_unit == "source"


def test_collate_crops_pads_and_maps_labels() -> None:
    examples = c.datasets(SMALL)["train"][:8]
    batch = c.collate(examples, {"max_length": 6})
    assert batch["ids"] == [e["id"] for e in examples]
    assert batch["input_ids"].shape[1] <= 6 and batch["input_ids"].shape == batch["attention_mask"].shape
    assert [c.LABEL_NAMES[t] for t in batch["labels"].tolist()] == [e["label"] for e in examples]
    full = c.collate(examples, {"max_length": 16})
    for row, e in enumerate(examples):
        assert c.decode(full, row) == e["text"]
        assert int(full["attention_mask"][row].sum()) == c.length(e)
        assert (full["input_ids"][row][full["attention_mask"][row] == 0] == c.PAD).all()


def test_model_loss_and_predictions() -> None:
    model = c.build_model({"d_model": 16, "hidden": 32})
    batch = c.collate(c.datasets(SMALL)["val"][:16], {})
    total, count = c.loss(model, batch)
    assert int(count) == 16
    assert abs(float(total.detach()) / 16 - math.log(4)) < 0.3  # near uniform at initialisation
    pred = c.predict(model, batch)
    assert pred.shape == batch["labels"].shape and pred.dtype == torch.long


def test_learns_in_a_few_seconds_on_cpu() -> None:
    params = {
        **SMALL,
        "d_model": 32,
        "hidden": 64,
        "dropout": 0.0,
        "microbatch": 32,
        "accumulation": 1,
        "lr": 3e-3,
        "optimizer": "adamw",
        "grad_clip": 1.0,
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and immune to a busy machine
    try:
        tr = Trainer(c.task, params, 0, torch.device("cpu"), total_updates=80)
        tr.load_data()
        tr.build()
        before = tr.evaluate("val")["loss"]
        for _ in range(80):
            tr.update()
        after = tr.evaluate("val")["loss"]
        tr.model.eval()
        with torch.no_grad():
            batch = tr.collate(list(tr.splits["val"]))
            acc = float((c.predict(tr.model, batch) == batch["labels"]).float().mean())
    finally:
        torch.set_num_threads(threads)
    assert after < 0.6 * before and acc >= 0.75, (before, after, acc)


def test_shipped_campaign_uses_the_classifier() -> None:
    nb = nbm.load(ROOT / "campaigns" / "classifier")
    task = load_task(nb.task.entry)
    assert task is c.task
    params = nb.params()
    data = task.datasets(params)
    assert len(data["train"]) == params["train_examples"]
    assert max(c.length(e) for split in data.values() for e in split) <= params["max_length"]  # nothing is cropped
    assert len({v.id for v in nb.variants}) == 3
