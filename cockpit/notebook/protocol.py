"""The protocol's fixed rules as the notebook states them (read by a new run's record and by drift checks)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from .model import Notebook


class Rules(TypedDict):
    """The protocol's fixed rules: what is held constant, the budget (updates, epochs or examples, as given), the stop
    rules that are set, how often a run validates, and the quality metric and its direction."""

    held_constant: str
    budget: dict[str, float]
    stop: dict[str, float | bool]
    validation_every_updates: int
    quality_metric: str
    higher_is_better: bool


def rules(nb: Notebook) -> Rules:
    """The fixed rules as they stand in the notebook now."""
    b, c = nb.batch, nb.campaign
    stop = {k: v for k, v in dataclasses.asdict(nb.stop).items() if k != "notes" and v is not None}
    budget: dict[str, float] = {}
    for k in ("updates", "epochs", "examples"):
        given = getattr(b, k)
        if given is not None:
            budget[k] = given
    return {
        "held_constant": c.held_constant,
        "budget": budget,
        "stop": stop,
        "validation_every_updates": nb.validation.every_updates,
        "quality_metric": c.quality_metric,
        "higher_is_better": c.higher_is_better,
    }


def record(nb: Notebook) -> dict[str, Any]:
    """What a new run writes into its run.toml: the revision and its rules (:class:`Rules`). A plain dict, as
    :func:`cockpit.runs.rows.protocol_record` hands it on to run.toml."""
    return {"revision": nb.campaign.protocol_revision, **rules(nb)}
