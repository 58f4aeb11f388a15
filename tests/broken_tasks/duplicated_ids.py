"""tinylm whose ids restart at 0 in every split (so they collide), and one with ids missing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cockpit.tasks import tinylm as t


def _restarting(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    data = t.datasets(params)
    for split in data.values():
        for i, e in enumerate(split):
            e["id"] = f"ex-{i:05d}"
    return data


task = replace(t.task, datasets=_restarting, name="duplicated_ids")


def _missing(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    data = t.datasets(params)
    for i in (3, 7):
        del data["train"][i]["id"]
    return data


missing = replace(t.task, datasets=_missing, name="missing_ids")
