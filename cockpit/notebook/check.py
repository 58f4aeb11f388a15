"""The value checks of a parsed notebook: ranges, choices, ids, references between sections."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeGuard

from .model import (
    DECISION_KINDS,
    HELD,
    PRECISIONS,
    RUN_KINDS,
    STRATEGIES,
    BatchSpec,
    Notebook,
    TrainingSpec,
)


def suggest(key: str, options: Any) -> str:
    """A did-you-mean for a key that is not one of ``options``."""
    import difflib

    close = difflib.get_close_matches(key, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_values(nb: Notebook, problems: list[str]) -> None:
    def bad(path: str, msg: str) -> None:
        problems.append(f"{path}: {msg}")

    def num(x: Any) -> TypeGuard[float]:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    c = nb.campaign
    if isinstance(c.name, str) and not c.name.strip():
        bad("campaign.name", "must not be empty")
    if c.held_constant not in HELD:
        bad("campaign.held_constant", f"is {c.held_constant!r}; use one of {', '.join(HELD)}")
    if isinstance(nb.task.entry, str) and ":" not in nb.task.entry:
        bad(
            "task.entry",
            f"is {nb.task.entry!r}; write 'package.module:attribute' or 'path/to/file.py:attribute'",
        )

    b = nb.batch
    for name in ("microbatch", "accumulation", "data_replicas", "model_parallel"):
        v = getattr(b, name)
        if isinstance(v, int) and v < 1:
            bad(f"batch.{name}", f"is {v}; it must be a whole number >= 1")
    if isinstance(b.eval_microbatch, int) and b.eval_microbatch < 1:
        bad("batch.eval_microbatch", f"is {b.eval_microbatch}; it must be >= 1")
    budgets = [k for k in ("updates", "epochs", "examples") if getattr(b, k) is not None]
    if len(budgets) != 1:
        bad(
            "batch",
            "give exactly one budget: updates, epochs or examples"
            + (f" (found {', '.join(budgets)})" if budgets else ""),
        )
    for k in ("updates", "epochs", "examples", "dataset_size"):
        v = getattr(b, k)
        if num(v) and v <= 0:
            bad(f"batch.{k}", f"is {v}; it must be > 0")

    t = nb.training
    if num(t.lr) and not (t.lr > 0 and math.isfinite(t.lr)):
        bad("training.lr", f"is {t.lr}; a learning rate must be a positive number")
    if num(t.weight_decay) and t.weight_decay < 0:
        bad("training.weight_decay", f"is {t.weight_decay}; it must be >= 0")
    if t.optimizer not in ("adamw", "sgd"):
        bad("training.optimizer", f"is {t.optimizer!r}; use adamw or sgd")
    if t.schedule not in ("constant", "cosine", "linear"):
        bad("training.schedule", f"is {t.schedule!r}; use constant, cosine or linear")
    if t.precision not in PRECISIONS:
        bad("training.precision", f"is {t.precision!r}; use one of {', '.join(PRECISIONS)}")
    if t.device not in ("auto", "cpu", "cuda"):
        bad("training.device", f"is {t.device!r}; use auto, cpu or cuda")
    if num(t.grad_clip) and t.grad_clip < 0:
        bad("training.grad_clip", f"is {t.grad_clip}; it must be >= 0 (0 or left out: no clipping)")

    if not nb.variants:
        bad("variants", "declare at least one [[variants]] (the reference)")
    seen: set[str] = set()
    settable = set(_field_names(TrainingSpec)) | set(_field_names(BatchSpec)) | set(nb.task.params)
    for i, v in enumerate(nb.variants):
        if v is None:
            continue
        if not v.id:
            bad(f"variants[{i}].id", "is empty; give every variant a short id such as 'lr2e-4'")
        if v.id in seen:
            bad(
                f"variants[{i}].id",
                f"duplicate variant id {v.id!r}; every variant needs its own id",
            )
        seen.add(v.id)
        if v.kind not in ("quality", "memory"):
            bad(f"variants[{i}].kind", f"is {v.kind!r}; use quality or memory")
        for key, val in v.set.items():
            if key not in settable:
                bad(
                    f"variants[{i}].set.{key}",
                    "is not a key of [training], [batch] or [task.params]" + suggest(key, settable),
                )
            elif key == "lr" and num(val) and val <= 0:
                bad(f"variants[{i}].set.lr", f"is {val}; a learning rate must be positive")
            elif key in ("microbatch", "accumulation", "data_replicas") and (
                not isinstance(val, int) or isinstance(val, bool) or val < 1
            ):
                bad(f"variants[{i}].set.{key}", f"is {val!r}; it must be a whole number >= 1")
            elif key == "precision" and val not in PRECISIONS:
                bad(
                    f"variants[{i}].set.precision",
                    f"is {val!r}; use one of {', '.join(PRECISIONS)}",
                )
    refs = [v.id for v in nb.variants if v is not None and v.reference]
    if len(refs) > 1:
        bad("variants", f"more than one reference variant ({', '.join(refs)}); mark exactly one")

    s = nb.stop
    if num(s.divergence_factor) and s.divergence_factor <= 1:
        bad("stop.divergence_factor", f"is {s.divergence_factor}; it must be > 1")
    if isinstance(s.patience, int) and s.patience < 1:
        bad("stop.patience", f"is {s.patience}; it must be >= 1")
    if num(s.wall_clock_minutes) and s.wall_clock_minutes <= 0:
        bad("stop.wall_clock_minutes", f"is {s.wall_clock_minutes}; it must be > 0")
    if isinstance(nb.validation.every_updates, int) and nb.validation.every_updates < 1:
        bad("validation.every_updates", f"is {nb.validation.every_updates}; it must be >= 1")
    ck = nb.checkpoints
    if isinstance(ck.every_updates, int) and ck.every_updates < 0:
        bad("checkpoints.every_updates", f"is {ck.every_updates}; it must be >= 0 (0: not by count)")
    if num(ck.every_minutes) and not (0 <= ck.every_minutes < math.inf):
        bad("checkpoints.every_minutes", f"is {ck.every_minutes}; it must be a number >= 0 (0: not by time)")
    if isinstance(ck.keep, int) and ck.keep < 1:
        bad("checkpoints.keep", f"is {ck.keep}; keep at least the newest checkpoint (>= 1)")
    p = nb.pilot
    if isinstance(p.overfit_examples, int) and p.overfit_examples < 1:
        bad("pilot.overfit_examples", "must be >= 1")
    if isinstance(p.updates_after_resume, int) and p.updates_after_resume < 1:
        bad("pilot.updates_after_resume", "must be >= 1")
    if isinstance(p.timed_updates, int) and not 1 <= p.timed_updates <= 1000:
        bad("pilot.timed_updates", f"is {p.timed_updates}; time between 1 and 1000 later updates")

    run_ids: set[str] = set()
    for i, r in enumerate(nb.runs):
        if r is None:
            continue
        if not r.id:
            bad(f"runs[{i}].id", "is empty; every run needs an id")
        if r.id in run_ids:
            bad(f"runs[{i}].id", f"duplicate run id {r.id!r}; run ids are never reused")
        run_ids.add(r.id)
        if r.variant not in seen:
            bad(
                f"runs[{i}].variant",
                f"run {r.id!r} names unknown variant {r.variant!r}; variants are {', '.join(sorted(seen))}",
            )
        if r.kind not in RUN_KINDS:
            bad(f"runs[{i}].kind", f"is {r.kind!r}; use pilot or train")
    for i, r in enumerate(nb.runs):
        if r is not None and r.follows and r.follows not in run_ids:
            bad(f"runs[{i}].follows", f"names unknown run {r.follows!r}")
    for i, d in enumerate(nb.decisions):
        if d is None:
            continue
        if d.kind not in DECISION_KINDS:
            bad(f"decisions[{i}].kind", f"is {d.kind!r}; use decision or observation")
        for rid in d.runs:
            if rid not in run_ids:
                bad(f"decisions[{i}].runs", f"names unknown run {rid!r}")
    if isinstance(nb.rental.days, int) and nb.rental.days < 1:
        bad("rental.days", f"is {nb.rental.days}; it must be >= 1")
    if nb.selection.strategy and nb.selection.strategy not in STRATEGIES:
        bad(
            "selection.strategy",
            f"is {nb.selection.strategy!r}; use one of {', '.join(STRATEGIES)}",
        )


def _field_names(cls: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]
