"""tinylm cropped so hard that answers are cut, and a collate that never crops.

``task`` is tinylm exactly, meant for a campaign whose max_length (20) is too
short for its instruction -> answer pairs, as a memory variant might set it:
long instructions leave no answer token, most answers lose their end.
``tiny`` crops at 8 whatever the campaign says (so the gate cannot measure
what cropping took, and says it assumed it): almost nothing is supervised and
whole microbatches are ignored. ``uncropped`` forgets to crop at all.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cockpit.tasks import tinylm as t

task = replace(t.task, name="truncated_targets")


def _crop_at_8(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return t.collate(examples, {**params, "max_length": 8})


tiny = replace(t.task, collate=_crop_at_8, max_length=lambda p: 8, name="tiny_max_length")


def _no_crop(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return t.collate(examples, {**params, "max_length": 10_000})


uncropped = replace(t.task, collate=_no_crop, max_length=lambda p: 24, name="uncropped")
