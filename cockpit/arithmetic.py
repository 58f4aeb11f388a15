"""Batch arithmetic: how many examples one update sees, and how many updates a budget is.

One module for the CLI, the TUI and the rental plan, so that the three never
disagree. These are counts: they predict neither duration nor quality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HELD = ("updates", "epochs", "examples")

CAVEAT = (
    "These counts predict neither duration nor quality: time per update comes "
    "from a measured pilot, quality from runs."
)


@dataclass(frozen=True)
class BatchPlan:
    microbatch: int
    accumulation: int = 1
    data_replicas: int = 1
    model_parallel: int = 1  # tensor/pipeline ranks: more GPUs, same examples
    dataset_size: int | None = None
    drop_last: bool = True

    def __post_init__(self) -> None:
        for name in ("microbatch", "accumulation", "data_replicas", "model_parallel"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.dataset_size is not None and self.dataset_size < 0:
            raise ValueError(f"dataset_size must be >= 0, got {self.dataset_size}")

    @property
    def examples_per_update(self) -> int:
        # Model parallelism splits one model over GPUs: it does not multiply
        # the examples an update sees. Only data replicas do.
        return self.microbatch * self.accumulation * self.data_replicas

    @property
    def gpus(self) -> int:
        return self.data_replicas * self.model_parallel

    def updates_per_epoch(self) -> int:
        n = self._need_dataset()
        per = self.examples_per_update
        return n // per if self.drop_last else math.ceil(n / per)

    def examples_per_epoch(self) -> int:
        """Examples actually seen in one epoch (fewer than the dataset when
        the incomplete last update is dropped)."""
        n = self._need_dataset()
        if self.drop_last:
            return self.updates_per_epoch() * self.examples_per_update
        return n

    def updates_for(self, *, epochs: float | None = None, examples: int | None = None) -> int:
        if epochs is not None:
            if epochs < 0:
                raise ValueError("epochs must be >= 0")
            whole = int(epochs)
            frac = epochs - whole
            return whole * self.updates_per_epoch() + int(frac * self.updates_per_epoch())
        if examples is not None:
            if examples < 0:
                raise ValueError("examples must be >= 0")
            per = self.examples_per_update
            return examples // per if self.drop_last else math.ceil(examples / per)
        raise ValueError("give epochs or examples")

    def examples_seen(self, updates: int) -> int:
        return updates * self.examples_per_update

    def epochs_seen(self, updates: int) -> float:
        return self.examples_seen(updates) / self._need_dataset()

    def _need_dataset(self) -> int:
        if not self.dataset_size:
            raise ValueError("dataset_size is needed for epoch arithmetic")
        return self.dataset_size


@dataclass(frozen=True)
class Budget:
    """What a run trains for, resolved to updates."""

    updates: int
    examples_seen: int
    epochs_seen: float | None
    incomplete_dropped: int  # examples per epoch left out by drop_last


def resolve_budget(
    plan: BatchPlan,
    *,
    updates: int | None = None,
    epochs: float | None = None,
    examples: int | None = None,
) -> Budget:
    given = [x for x in (updates, epochs, examples) if x is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of updates, epochs or examples")
    if updates is None:
        updates = plan.updates_for(epochs=epochs, examples=examples)
    if updates < 0:
        raise ValueError("updates must be >= 0")
    epochs_seen = plan.epochs_seen(updates) if plan.dataset_size else None
    dropped = 0
    if plan.dataset_size and plan.drop_last:
        dropped = plan.dataset_size - plan.examples_per_epoch()
    return Budget(updates, plan.examples_seen(updates), epochs_seen, dropped)


def what_changes(held: str, reference: BatchPlan, variant: BatchPlan, ref_budget: Budget) -> str:
    """Say in words which quantity a batch change moves, given what the campaign holds constant."""
    if held not in HELD:
        raise ValueError(f"held_constant must be one of {', '.join(HELD)}")
    r, v = reference.examples_per_update, variant.examples_per_update
    if r == v:
        return f"same effective batch ({v} examples per update): updates, epochs and examples seen all unchanged"
    if held == "updates":
        seen = variant.examples_seen(ref_budget.updates)
        return (
            f"effective batch {r} -> {v} at a fixed {ref_budget.updates} updates: "
            f"examples seen change {ref_budget.examples_seen} -> {seen}"
        )
    if held == "epochs":
        if ref_budget.epochs_seen is None:
            return f"effective batch {r} -> {v}: updates per epoch change (dataset size unknown)"
        ups = variant.updates_for(epochs=ref_budget.epochs_seen)
        return (
            f"effective batch {r} -> {v} at a fixed {ref_budget.epochs_seen:g} epochs: "
            f"updates change {ref_budget.updates} -> {ups}"
        )
    ups = variant.updates_for(examples=ref_budget.examples_seen)
    return (
        f"effective batch {r} -> {v} at a fixed {ref_budget.examples_seen} examples: "
        f"updates change {ref_budget.updates} -> {ups}"
    )


def describe(plan: BatchPlan, budget: Budget | None = None) -> list[tuple[str, str]]:
    """Rows for a table: (quantity, value with its derivation)."""
    rows = [
        (
            "examples per update",
            f"{plan.examples_per_update} = microbatch {plan.microbatch} x accumulation "
            f"{plan.accumulation} x data replicas {plan.data_replicas}",
        )
    ]
    if plan.model_parallel > 1:
        rows.append(("GPUs", f"{plan.gpus} (model parallel x{plan.model_parallel} does not multiply the batch)"))
    if plan.dataset_size:
        tail = "incomplete last update dropped" if plan.drop_last else "incomplete last update kept"
        rows.append(("updates per epoch", f"{plan.updates_per_epoch()} ({plan.dataset_size} examples, {tail})"))
    if budget is not None:
        rows.append(("updates", str(budget.updates)))
        rows.append(("examples seen", str(budget.examples_seen)))
        if budget.epochs_seen is not None:
            rows.append(("epochs seen", f"{budget.epochs_seen:.4g}"))
        if budget.incomplete_dropped:
            rows.append(("left out per epoch", f"{budget.incomplete_dropped} examples (drop_last)"))
    return rows
