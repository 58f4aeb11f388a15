"""The pilot's own settings: run.toml's ``[pilot]``, read once into one record.

The notebook's ``[pilot]`` section (:class:`cockpit.notebook.model.PilotSpec`) is frozen into run.toml as a table;
:meth:`PilotConfig.from_table` reads it once, each setting with its default, so a phase asks
``ctx.pilot_cfg.overfit_steps`` instead of spelling the key and its default where it reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


def _number(table: Mapping[str, object], key: str, default: float) -> float:
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"[pilot] {key} = {v!r}: not a number")
    return float(v)


def _whole(table: Mapping[str, object], key: str, default: int) -> int:
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"[pilot] {key} = {v!r}: not a whole number")
    return int(v)


@dataclass(frozen=True)
class PilotConfig:
    """run.toml's ``[pilot]``: one field per setting, with the default a run without it gets."""

    updates_after_resume: int = 2  # updates the resumed process runs
    overfit_examples: int = 16  # the overfit gate's fixed examples (the gate keeps it within 8..32)
    overfit_steps: int = 200  # at most; it stops as soon as both thresholds are met
    overfit_loss_ratio: float = 0.1  # must fall below this share of its starting value
    overfit_accuracy: float = 0.9  # share of supervised targets the fitted model must predict right
    overfit_lr: float | None = None  # None: the training lr as it is
    timed_updates: int = 5  # later updates timed one by one
    grad_tolerance: float = 1e-4  # relative, accumulated vs single-batch gradient
    headroom: float = 0.1

    @classmethod
    def from_table(cls, table: Mapping[str, object] | None) -> PilotConfig:
        """The record from run.toml's ``[pilot]`` table (absent settings: their defaults; unknown keys ignored)."""
        t: Mapping[str, object] = table or {}
        d = cls()
        lr = t.get("overfit_lr")
        return cls(
            updates_after_resume=_whole(t, "updates_after_resume", d.updates_after_resume),
            overfit_examples=_whole(t, "overfit_examples", d.overfit_examples),
            overfit_steps=_whole(t, "overfit_steps", d.overfit_steps),
            overfit_loss_ratio=_number(t, "overfit_loss_ratio", d.overfit_loss_ratio),
            overfit_accuracy=_number(t, "overfit_accuracy", d.overfit_accuracy),
            overfit_lr=None if lr is None else _number(t, "overfit_lr", 0.0),
            timed_updates=_whole(t, "timed_updates", d.timed_updates),
            grad_tolerance=_number(t, "grad_tolerance", d.grad_tolerance),
            headroom=_number(t, "headroom", d.headroom),
        )
