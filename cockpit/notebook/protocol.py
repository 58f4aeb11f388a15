"""The protocol's fixed rules as the notebook states them (read by a new run's record and by drift checks)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .model import Notebook


def rules(nb: Notebook) -> dict[str, Any]:
    """The fixed rules as they stand in the notebook now."""
    b, c = nb.batch, nb.campaign
    stop = {k: v for k, v in dataclasses.asdict(nb.stop).items() if k != "notes" and v is not None}
    return {
        "held_constant": c.held_constant,
        "budget": {k: getattr(b, k) for k in ("updates", "epochs", "examples") if getattr(b, k) is not None},
        "stop": stop,
        "validation_every_updates": nb.validation.every_updates,
        "quality_metric": c.quality_metric,
        "higher_is_better": c.higher_is_better,
    }


def record(nb: Notebook) -> dict[str, Any]:
    """What a new run writes into its run.toml: the revision and its rules."""
    return {"revision": nb.campaign.protocol_revision, **rules(nb)}
