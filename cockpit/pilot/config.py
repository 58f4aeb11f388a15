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


def _optional(table: Mapping[str, object], key: str) -> float | None:
    """A setting that is off when absent (or 0): None then, else its number."""
    return _number(table, key, 0.0) or None


@dataclass(frozen=True)
class StopConfig:
    """run.toml's ``[stop]`` as a training run reads it: absent settings stop nothing (None)."""

    nonfinite: bool = True  # a loss that is not finite stops the run
    divergence_factor: float | None = None  # the loss above this times its starting value stops it
    patience: int | None = None  # evaluations without improvement
    wall_clock_minutes: float | None = None

    @classmethod
    def from_table(cls, table: Mapping[str, object] | None) -> StopConfig:
        t: Mapping[str, object] = table or {}
        patience = _optional(t, "patience")
        return cls(
            nonfinite=bool(t.get("nonfinite", True)),
            divergence_factor=_optional(t, "divergence_factor"),
            patience=int(patience) if patience else None,
            wall_clock_minutes=_optional(t, "wall_clock_minutes"),
        )


@dataclass(frozen=True)
class ValidationConfig:
    """run.toml's ``[validation]``: validate every so many updates (0: never)."""

    every_updates: int = 0

    @classmethod
    def from_table(cls, table: Mapping[str, object] | None) -> ValidationConfig:
        return cls(every_updates=_whole(table or {}, "every_updates", 0))


@dataclass(frozen=True)
class CheckpointConfig:
    """run.toml's ``[checkpoints]``: when a training run writes a checkpoint, how many it keeps, and whether it
    leaves frozen parameters out (absent or 0: not by count, not by time; keep 2)."""

    every_updates: int = 0
    every_minutes: float = 0.0
    keep: int = 2
    trainable_only: bool = False

    @classmethod
    def from_table(cls, table: Mapping[str, object] | None) -> CheckpointConfig:
        t: Mapping[str, object] = table or {}
        return cls(
            every_updates=_whole(t, "every_updates", 0),
            every_minutes=_number(t, "every_minutes", 0.0),
            keep=_whole(t, "keep", 2) or 2,
            trainable_only=bool(t.get("trainable_only")),
        )
