"""The overfit run on past its threshold: where the loss settles, whether it is bounded below, and at which floor.

A fit that passes its threshold does not stop there: it runs on (:func:`runon_steps`, a bounded number of extra
steps) until its loss settles (its fall per 10-step window shrinks to under 0.5 % of its start) or the budget is
spent, so the whole curve is judged:

- *bounded below*: a loss that keeps falling faster and faster after the fit (the fall per window growing) and
  has fallen by more than its whole start, or that overflows on the way, is unbounded below: a term with the
  wrong sign (a KL or a likelihood rewarded instead of penalised), a sum of non-negative terms that cannot go
  negative. A loss that crosses zero at a steady rate is a warning: a likelihood of real-valued targets with a
  learned variance is unbounded on memorised examples, a sum of non-negative terms never is. One still falling
  faster at the end, by less than its start and above zero, is noted, not judged (a late drop looks the same);
- *its floor*: a cross-entropy over probabilities (softmax applied twice) cannot go below
  ``ln(e + C - 1) - 1`` for C classes. Where the settled loss equals the cross-entropy of ``softmax(logits)``
  while the logits' own is far lower, the double softmax is measured; where it only sits at that floor, it is
  named as the likely cause.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import torch

from ...contract import Example
from .. import outputs
from ..gate import Gate
from ..rng import rng_state, set_rng_state
from ..trainer import Trainer
from . import objective

WINDOW = 10
RUNON_MAX = 100  # a run-on whose fall still accelerates goes on to this many steps past the fit
BOUNDED = "loss bounded below"
FLOOR = "settled loss above its floor"


def runon_steps(passed_at: int) -> int:
    """Extra steps after the fit first passes: a quarter as many as it took, between 40 and :data:`RUNON_MAX`
    (one still falling faster and faster at the end goes on to that many)."""
    return min(RUNON_MAX, max(40, passed_at // 4))


def windows(values: list[float]) -> list[float]:
    """Means of consecutive ``WINDOW``-step windows, the last one ending at the last value."""
    n = len(values) // WINDOW
    start = len(values) - n * WINDOW
    return [statistics.fmean(values[start + i * WINDOW : start + (i + 1) * WINDOW]) for i in range(n)]


def falls(values: list[float]) -> list[float]:
    m = windows(values)
    return [a - b for a, b in zip(m, m[1:], strict=False)]


def accelerating(values: list[float]) -> bool:
    """The fall per window grew over the last three windows and is clearly positive."""
    f = falls(values)
    return len(f) >= 3 and f[-1] > f[-2] > f[-3] > 0


def runaway(run: list[float], start: float) -> bool:
    """Since the fit passed, the loss fell by more than its whole start, faster and faster."""
    return accelerating(run) and run[0] - min(run) > abs(start)


def settled(values: list[float], start: float) -> bool:
    """The last window's fall is under 0.5 % of the start's size (or the loss rose), and not accelerating."""
    f = falls(values)
    if len(f) < 2:
        return False
    return f[-1] < 0.005 * max(abs(start), 1e-6) and not accelerating(values)


@dataclass(frozen=True)
class Reading:
    """The loss on the subset with the model's output read beside it: the mean loss, the standard losses of the
    captured output (:class:`.objective.Implied`, weighted over the microbatches), and the named terms."""

    loss: float
    ce: float | None = None
    ce_softmaxed: float | None = None
    mse: float | None = None
    classes: int | None = None
    terms: dict[str, float] = field(default_factory=dict)

    @property
    def main(self) -> float | None:
        return self.ce if self.ce is not None else self.mse


@torch.no_grad()
def read(tr: Trainer, mbs: list[list[Example]]) -> Reading | None:
    """:class:`Reading` over the microbatches, under one replayed random state (the fit's stream is left as it
    was); None when a loss is not finite."""
    saved = rng_state()
    total = 0.0
    parts: dict[str, list[float]] = {}
    ce = soft = mse = 0.0
    have_ce = have_mse = True
    classes: int | None = None
    try:
        for mb in mbs:
            batch = tr.collate(mb)
            with outputs.capture(tr.model) as cap:
                lo = tr.loss_call(batch, net=tr.model)
            v = float(lo.value) / float(lo.count) if lo.count is not None else float(lo.value)
            if not math.isfinite(v):
                return None
            total += v / len(mbs)
            for k, t in (lo.terms or cap.terms).items():
                parts.setdefault(k, []).append(float(t))
            im = objective.implied(tr.task, cap.logits, batch)
            have_ce = have_ce and im is not None and im.ce is not None
            have_mse = have_mse and im is not None and im.mse is not None
            if im is not None:
                classes = im.classes
                ce += (im.ce or 0.0) / len(mbs)
                soft += (im.ce_softmaxed or 0.0) / len(mbs)
                mse += (im.mse or 0.0) / len(mbs)
    finally:
        set_rng_state(saved)
    return Reading(
        loss=total,
        ce=ce if have_ce else None,
        ce_softmaxed=soft if have_ce else None,
        mse=mse if have_mse and not have_ce else None,
        classes=classes if have_ce else None,
        terms={k: statistics.fmean(v) for k, v in parts.items() if len(v) == len(mbs)},
    )


def bounded(g: Gate, losses: list[float], passed_at: int | None, overflow: int | None) -> None:
    """The check :data:`BOUNDED` over the run-on (see the module's docstring)."""
    if passed_at is None:
        g.not_applicable(
            BOUNDED,
            "the fit never passed its threshold, so it did not run on to where its loss settles; whether the "
            "loss is bounded below is read only past the fit",
        )
        return
    run = losses[passed_at - 1 :]
    start = losses[0]
    low = min(run)
    grew = accelerating(run)
    f = falls(run)
    rates = ", ".join(f"{x:.3g}" for x in f[-4:])
    fell_by = run[0] - low
    at = f"the fit passed at step {passed_at} (loss {run[0]:.4g}) and ran on {len(run) - 1} steps"
    if overflow is not None:
        g.check(
            BOUNDED,
            False,
            f"{at}, falling to {low:.4g} before the loss stopped being finite at step {overflow}: it fell without "
            "limit. A loss that is a sum of non-negative terms (a KL, a likelihood of discrete targets, a squared "
            "error) cannot do that: look for a term with the wrong sign (the KL of a VAE subtracted, a likelihood "
            "maximised where its negative belongs)",
        )
        return
    if runaway(run, start):
        g.check(
            BOUNDED,
            False,
            f"{at}: it fell to {low:.4g}, {fell_by:.4g} below where the fit passed (more than its whole start "
            f"{start:.4g}), faster and faster (the fall per {WINDOW} steps: {rates}): unbounded below. A bounded "
            "objective slows down near its floor; this one runs away. Look for a term with the wrong sign (the KL "
            "of a VAE subtracted, a log-likelihood added instead of its negative): the long run would optimise "
            "that term to minus infinity",
        )
        return
    if start > 0 and low < 0 and not settled(run, start):
        g.check(
            BOUNDED,
            False,
            f"{at}: it crossed zero (lowest {low:.4g}, from a start of {start:.4g}) and was still falling (the fall "
            f"per {WINDOW} steps: {rates}). A sum of non-negative terms (a KL, a likelihood of discrete targets, a "
            "squared error) cannot go negative: look for a term with the wrong sign. A likelihood of real-valued "
            "targets with a learned variance is unbounded on memorised examples, which is expected",
            warn=True,
        )
        return
    if grew:  # no contradiction measured: a late drop looks the same over 100 steps, and it stayed above zero
        g.check(
            BOUNDED,
            True,
            f"{at}: still falling faster when the run-on ended (the fall per {WINDOW} steps: {rates}; lowest "
            f"{low:.4g}), but by less than its start and without crossing zero: a late drop, or a slow runaway "
            "the run-on is too short to tell; raise [pilot] overfit_steps to see where it settles",
        )
        return
    how = "it settled" if settled(run, start) else "its fall slowing down, as a bounded loss's does"
    g.check(BOUNDED, True, f"{at}: {how} (lowest {low:.4g}; the fall per {WINDOW} steps: {rates or 'none'})")


def floor(g: Gate, end: Reading | None, settled_loss: float, discrete: bool) -> None:
    """The check :data:`FLOOR`: a settled cross-entropy at the floor of one over probabilities (a double softmax)."""
    if not discrete or end is None or end.ce is None or end.ce_softmaxed is None or not end.classes:
        g.not_applicable(
            FLOOR,
            "no cross-entropy of logits over class or token ids to read on the subset (the loss's floor is known "
            "only for that form)",
        )
        return
    c = end.classes
    ds = objective.double_softmax_floor(c)
    head = (
        f"settled at {settled_loss:.4f}; the cross-entropy of the model's logits on the subset is {end.ce:.4f}, of "
        f"softmax(logits) {end.ce_softmaxed:.4f}; a cross-entropy over probabilities cannot go below "
        f"ln(e + {c} - 1) - 1 = {ds:.4f}"
    )
    measured = objective.softmaxed(end.loss, end.ce, end.ce_softmaxed, 2e-3) and end.ce < end.ce_softmaxed
    if measured:
        g.check(
            FLOOR,
            False,
            head + f": your loss ({end.loss:.4f}) is the cross-entropy of softmax(logits), not of the logits: a "
            "double softmax (cross_entropy applies log_softmax itself). Its gradient flattens as the model "
            "learns and the loss can never go below that floor: give cross_entropy the logits, or use nll_loss "
            "on log_softmax",
        )
        return
    at_floor = abs(settled_loss - ds) <= max(0.03 * ds, 0.01)
    if at_floor and not objective.close(end.loss, end.ce, 0.05):
        g.check(
            FLOOR,
            False,
            head + ": the loss sits at that floor, the mark of softmax applied twice (probabilities handed to "
            "a cross-entropy); a label smoothing that happens to have the same floor would explain it too",
            warn=True,
        )
        return
    g.check(FLOOR, True, head)


def in_range(g: Gate, curve: list[float], discrete: bool) -> None:
    """A loss over discrete targets that starts at or above 0 never goes below it: a negative value is impossible."""
    losses = [x for x in curve if math.isfinite(x)]
    name = "loss in range"
    if not discrete:
        g.not_applicable(
            name,
            "the batch has no integer targets (class or token ids), so the loss need not be a negative "
            "log-likelihood over a discrete distribution, and a negative value can be legitimate",
        )
        return
    if not losses:
        g.not_applicable(name, "no finite loss to read")
        return
    if losses[0] < 0:
        g.check(
            name,
            False,
            f"negative from the start ({losses[0]:.4g}) for a loss over integer targets: not a negative "
            "log-likelihood, or one over log-probabilities that are not normalised (scores or probabilities given "
            "where log_softmax belongs); if the objective is meant to go below 0, this is expected",
            warn=True,
        )
        return
    low = min(losses)
    step = losses.index(low) + 1
    ok = low >= -1e-6 * max(1.0, abs(losses[0]))
    g.check(
        name,
        ok,
        f"never below 0 (lowest {low:.4g}) for a loss over integer targets"
        if ok
        else f"the loss went negative ({low:.4g} at overfit step {step}, from {losses[0]:.4g}): a negative "
        "log-likelihood over discrete targets (cross-entropy, CTC) cannot be below 0, so this value is impossible: "
        "look for log-probabilities that are not normalised (a missing log_softmax), a sign or a reduction "
        "that divides by the wrong count, or lengths that do not match the targets",
    )
