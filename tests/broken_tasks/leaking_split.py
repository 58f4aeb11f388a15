"""Split bugs in the classifier: examples split at random instead of by source, a
period split whose validation comes before training, copied inputs."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from cockpit.tasks import classifier as c


def _by_example(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    n_train, n_val, n_test = (
        int(params.get(k, d)) for k, d in (("train_examples", 256), ("val_examples", 32), ("test_examples", 32))
    )
    pool = c.make_split("all", n_train + n_val + n_test, 7)
    random.Random(0).shuffle(pool)  # shuffled by sentence: a source's sentences land in every split
    return {"train": pool[:n_train], "val": pool[n_train : n_train + n_val], "test": pool[n_train + n_val :]}


task = replace(c.task, datasets=_by_example, name="leaking_split")


# Groups are months; validation was cut from before the training period.
def _by_month(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    data = c.datasets(params)
    months = {"train": ["2021-03", "2021-04", "2021-05"], "val": ["2021-01", "2021-06"], "test": ["2021-07"]}
    for split, examples in data.items():
        for i, e in enumerate(examples):
            e["group"] = months[split][i % len(months[split])]
    return data


period = replace(c.task, datasets=_by_month, group_unit="period", name="period_before_train")


# Three validation sentences copy training sentences under new ids and sources.
def _copied(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    data = c.datasets(params)
    for k in range(3):
        data["val"][k] = dict(data["train"][10 * k], id=f"val-copy-{k}", group=f"val-copied-src{k}")
    return data


copied_inputs = replace(c.task, datasets=_copied, name="copied_inputs")
