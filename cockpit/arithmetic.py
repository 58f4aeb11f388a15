"""Batch arithmetic: how many examples one update sees, and how many updates a budget is.

One module for the CLI, the TUI and the rental plan, so that the three never
disagree. These are counts: they predict neither duration nor quality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .contract import Params
from .notebook.settings import Settings

HELD = ("updates", "epochs", "examples")

CAVEAT = (
    "These counts predict neither duration nor quality: time per update comes from a measured pilot, quality from runs."
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
            # The small tolerance keeps 0.29 x 100 at 29 updates, not 28.999... -> 28.
            part = math.floor((epochs - whole) * self.updates_per_epoch() + 1e-9)
            return whole * self.updates_per_epoch() + part
        if examples is not None:
            if examples < 0:
                raise ValueError("examples must be >= 0")
            per = self.examples_per_update
            if self.drop_last:
                return examples // per
            if self.dataset_size:
                # Keeping the incomplete batch, every epoch ends with a short update.
                full, rest = divmod(examples, self.dataset_size)
                return full * self.updates_per_epoch() + math.ceil(rest / per)
            return math.ceil(examples / per)
        raise ValueError("give epochs or examples")

    def examples_seen(self, updates: int) -> int:
        per = self.examples_per_update
        if self.drop_last or not self.dataset_size:
            return updates * per
        full, rest = divmod(updates, self.updates_per_epoch())
        return full * self.dataset_size + rest * per

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
    basis: str = "updates"  # the quantity the budget was given in: updates, epochs or examples
    amount: float = 0  # its value as given, before rounding to whole updates


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
    basis = "updates" if updates is not None else "epochs" if epochs is not None else "examples"
    amount = given[0]
    if updates is None:
        updates = plan.updates_for(epochs=epochs, examples=examples)
    if updates < 0:
        raise ValueError("updates must be >= 0")
    seen = plan.examples_seen(updates)
    if examples is not None and not plan.drop_last:
        seen = examples  # the last, incomplete update sees only what is left
    epochs_seen = seen / plan.dataset_size if plan.dataset_size else None
    dropped = 0
    if plan.dataset_size and plan.drop_last:
        dropped = plan.dataset_size - plan.examples_per_epoch()
    return Budget(updates, seen, epochs_seen, dropped, basis, amount)


def budget_from(plan: BatchPlan, settings: Settings | Params) -> Budget:
    """The budget of a campaign variant (its :class:`Settings`, or its flat parameters, ``Notebook.params``)."""
    s = settings if isinstance(settings, Settings) else Settings(settings)
    return resolve_budget(plan, updates=s.budget_updates, epochs=s.epochs, examples=s.examples)


def plan_from(settings: Settings | Params) -> BatchPlan:
    """The batch plan of a campaign variant (its :class:`Settings`, or its flat parameters, ``Notebook.params``)."""
    s = settings if isinstance(settings, Settings) else Settings(settings)
    return BatchPlan(
        microbatch=s.microbatch,
        accumulation=s.accumulation,
        data_replicas=s.data_replicas,
        model_parallel=s.model_parallel,
        dataset_size=s.dataset_size,
        drop_last=s.drop_last,
    )


def hold(held: str, variant: BatchPlan, ref_budget: Budget) -> Budget:
    """The variant's budget when the campaign holds ``held`` at the reference's value.

    Holding updates moves the examples (and epochs) seen; holding epochs or
    examples moves the number of updates.
    """
    if held not in HELD:
        raise ValueError(f"held_constant must be one of {', '.join(HELD)}")
    if held == "updates":
        return resolve_budget(variant, updates=ref_budget.updates)
    if held == "epochs":
        if ref_budget.basis == "epochs":
            epochs = float(ref_budget.amount)
        elif ref_budget.epochs_seen is not None:
            epochs = ref_budget.epochs_seen
        else:
            raise ValueError("holding epochs constant needs the dataset size")
        if not variant.dataset_size:
            raise ValueError("holding epochs constant needs the dataset size")
        return resolve_budget(variant, epochs=epochs)
    examples = int(ref_budget.amount) if ref_budget.basis == "examples" else ref_budget.examples_seen
    return resolve_budget(variant, examples=examples)


def what_changes(held: str, reference: BatchPlan, variant: BatchPlan, ref_budget: Budget) -> str:
    """Say in words which quantity a batch change moves, given what the campaign holds constant."""
    if held not in HELD:
        raise ValueError(f"held_constant must be one of {', '.join(HELD)}")
    r, v = reference.examples_per_update, variant.examples_per_update
    same = r == v and reference.drop_last == variant.drop_last
    if same and reference.dataset_size == variant.dataset_size:
        return f"same effective batch ({v} examples per update): updates, epochs and examples seen all unchanged"
    if held == "epochs" and (ref_budget.epochs_seen is None or not variant.dataset_size):
        return f"effective batch {r} -> {v}: updates per epoch change (dataset size unknown)"
    vb = hold(held, variant, ref_budget)
    if held == "updates":
        text = (
            f"effective batch {r} -> {v} at a fixed {ref_budget.updates} updates: "
            f"examples seen change {ref_budget.examples_seen} -> {vb.examples_seen}"
        )
        if ref_budget.epochs_seen is not None and vb.epochs_seen is not None:
            text += f", epochs seen {ref_budget.epochs_seen:.4g} -> {vb.epochs_seen:.4g}"
        return text
    if held == "epochs":
        fixed = ref_budget.amount if ref_budget.basis == "epochs" else ref_budget.epochs_seen
        return (
            f"effective batch {r} -> {v} at a fixed {fixed:g} epochs: "
            f"updates change {ref_budget.updates} -> {vb.updates}"
        )
    fixed = int(ref_budget.amount) if ref_budget.basis == "examples" else ref_budget.examples_seen
    return (
        f"effective batch {r} -> {v} at a fixed {fixed} examples: updates change {ref_budget.updates} -> {vb.updates}"
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
        rows.append(
            (
                "GPUs",
                f"{plan.gpus} = data replicas {plan.data_replicas} x model parallel "
                f"{plan.model_parallel} (model parallelism does not multiply the batch)",
            )
        )
    if plan.dataset_size:
        tail = "incomplete last update " + ("dropped" if plan.drop_last else "kept")
        rows.append(
            (
                "updates per epoch",
                f"{plan.updates_per_epoch()} ({plan.dataset_size} examples, {tail})",
            )
        )
    if budget is not None:
        rows.append(("updates", f"{budget.updates}{_from(budget)}"))
        rows.append(("examples seen", str(budget.examples_seen)))
        if budget.epochs_seen is not None:
            rows.append(("epochs seen", f"{budget.epochs_seen:.4g}"))
        if budget.incomplete_dropped:
            rows.append(("left out per epoch", f"{budget.incomplete_dropped} examples (drop_last)"))
    return rows


def _from(budget: Budget) -> str:
    if budget.basis == "epochs":
        return f" (from {budget.amount:g} epochs)"
    if budget.basis == "examples":
        return f" (from {int(budget.amount)} examples)"
    return ""
