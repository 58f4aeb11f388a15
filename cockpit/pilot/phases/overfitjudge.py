"""The overfit gate's measurements: the loss's threshold and trends, the input-blind references, the fit's predictions.

A model that ignores its input reaches two references on the subset: the entropy of its targets (the loss of
predicting their frequencies) and the share of its most frequent target (the accuracy of always predicting it).
Where predictions exist, :func:`accuracy` also reads how confident they are: the loss the model would have if
every top prediction were right. When that alone is above the loss's threshold, the threshold is out of reach
whatever the model ranks: its output's scale (a frozen output layer after a norm, a fixed temperature) holds the
loss up, not wrong predictions, and the ranking decides (:func:`capped`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import torch

from ...contract import Example
from .. import outputs
from ..datascan import rows
from ..rng import rng_state, set_rng_state
from ..trainer import Trainer


@dataclass(frozen=True)
class Fit:
    """What the model predicts on the subset: the share of supervised targets right, how many, the ids of the
    examples with a wrong one, and the mean of -log(top probability) over the targets (None: no logits to read)."""

    share: float
    total: int
    wrong: list[Any]
    top_loss: float | None = None


@dataclass(frozen=True)
class Blind:
    """What a model that ignores its input reaches on the subset: the targets' entropy in nats (None: the targets
    are not class or token ids), whether they are integer ids, and the share of the most frequent target."""

    floor: float | None
    discrete: bool
    majority: float | None = None


def judge(losses: list[float], floor: float | None) -> dict[str, float]:
    """The loss's threshold from its own figures: the lower of its start and the input-blind floor, minus three
    times its step-to-step noise (at least 5 % of that reference); and where it ended (its best window)."""
    w = max(5, min(20, len(losses) // 5))
    tail = losses[-w:]
    noise = statistics.pstdev(tail) if len(tail) > 1 else 0.0
    ref = losses[0] if floor is None else min(losses[0], floor)
    margin = max(3 * noise, 0.05 * abs(ref))
    windows = [statistics.fmean(losses[i : i + w]) for i in range(0, max(1, len(losses) - w + 1))]
    return {"start": losses[0], "ref": ref, "noise": noise, "threshold": ref - margin, "end": min(windows)}


def still_learning(losses: list[float]) -> bool:
    """The last 20 steps' mean clearly below the 20 before: the loss is still falling (worth more steps)."""
    if len(losses) < 40:
        return True
    last, before = losses[-20:], losses[-40:-20]
    noise = statistics.pstdev(last)
    return statistics.fmean(last) < statistics.fmean(before) - max(noise / 2, 0.01 * abs(statistics.fmean(before)))


def _slope(values: list[float]) -> tuple[float, float]:
    """(least-squares slope per reading, its standard error)."""
    n = len(values)
    mx, my = (n - 1) / 2, statistics.fmean(values)
    sxx = sum((x - mx) ** 2 for x in range(n))
    slope = sum((x - mx) * (y - my) for x, y in enumerate(values)) / sxx
    resid = [y - (my + slope * (x - mx)) for x, y in enumerate(values)]
    return slope, math.sqrt(sum(r * r for r in resid) / max(n - 2, 1) / sxx)


def trend_falls(losses: list[float]) -> bool:
    """Over the last half of the run (40 steps at least), the loss still falls: a least-squares slope more than
    three standard errors below zero, worth at least 0.5 % of the loss over that stretch (a converged loss creeping
    towards its floor is not learning; a slow, steady or noisy descent is)."""
    tail = losses[-max(40, len(losses) // 2) :]
    n = len(tail)
    if n < 40:
        return False
    slope, se = _slope(tail)
    return slope < -3 * se and -slope * n >= 0.005 * abs(statistics.fmean(tail))


def trend_rises(shares: list[float], total: int) -> bool:
    """The share of targets right still rises at the last of its readings (one every 10 steps): over the last
    half of them (six at least), a least-squares slope more than three standard errors above zero worth at least
    one target over that stretch, or the last reading the best of all (the ranking improves in jumps of whole
    targets, which a straight line fits badly). A loss held up by its output's scale barely moves while the
    ranking still improves: the readings say so."""
    if len(shares) >= 4 and shares[-1] > max(shares[:-1]):
        return True
    tail = shares[-max(6, len(shares) // 2) :]
    n = len(tail)
    if n < 6 or total <= 0:
        return False
    slope, se = _slope(tail)
    return slope > 3 * se and slope * n >= 1 / total


def new_best(shares: list[float]) -> bool:
    """The accuracy readings of the last half hold a new best (a share right above every reading of the first
    half), or there are too few readings to say: worth more steps. Only steps are at stake here: the verdict's
    "still learning" is the stricter :func:`trend_rises`."""
    if len(shares) < 4:
        return True
    half = len(shares) // 2
    return max(shares[half:]) > max(shares[:half])


def above_chance(share: float, reference: float, total: int) -> bool:
    """``share`` of ``total`` targets right is clearly above ``reference`` (three binomial standard errors)."""
    p = min(max(reference, 0.0), 1.0)
    return share > p + 3 * math.sqrt(max(p * (1 - p), 1 / max(total, 1)) / max(total, 1))


def capped(j: dict[str, float], fit: Fit | None, first: float | None, blind: Blind) -> str | None:
    """Why a loss that stays above its threshold does not contradict a fit, where that is measured; else None.

    Preconditions, all measured: the model ranks the targets clearly better than a model that ignores its input
    (and than it did before training), its loss fell clearly below its own start, and its confidence alone puts
    the threshold out of reach (the loss it would have with every top prediction right is above the threshold)."""
    if fit is None or fit.top_loss is None or blind.majority is None:
        return None
    start, end, noise, threshold = j["start"], j["end"], j["noise"], j["threshold"]
    ref = max(blind.majority, first or 0.0)
    if not above_chance(fit.share, ref, fit.total) or not end < start - max(3 * noise, 0.01 * abs(start)):
        return None
    if fit.top_loss < threshold:
        return None  # its confidence could reach the threshold: wrong predictions hold the loss up
    return (
        f"out of reach at the model's confidence: the probability of its top prediction averages "
        f"{math.exp(-fit.top_loss):.1%} (geometric mean), so with every top prediction right its loss would still be "
        f"{fit.top_loss:.3f}; its ranking learned ({fit.share:.0%} of {fit.total} targets right, from "
        f"{first or 0:.0%}; a model that ignores its input gets at most {blind.majority:.0%}) and its loss fell "
        f"{start - end:.3f} from its start: the output's scale holds the loss up, not wrong predictions (an output "
        "layer that does not train after a norm, a fixed temperature), and the predictions decide"
    )


@torch.no_grad()
def blind_floor(tr: Trainer, examples: list[Example]) -> Blind:
    """The references of a model that ignores its input on these examples (see :class:`Blind`)."""
    task = tr.task
    counts: dict[int, int] = {}
    for i in range(0, len(examples), tr.microbatch):
        lab = tr.collate(examples[i : i + tr.microbatch]).get(task.label_key)
        if not torch.is_tensor(lab) or lab.dtype.is_floating_point or lab.dtype == torch.bool or lab.dim() == 0:
            return Blind(None, False)
        keep = lab != task.ignore_index
        if task.label_convention == "shift_in_loss" and lab.dim() >= 2:
            keep[:, 0] = False
        for v, c in zip(*torch.unique(lab[keep], return_counts=True), strict=True):
            counts[int(v)] = counts.get(int(v), 0) + int(c)
    total = sum(counts.values())
    if not total:
        return Blind(None, True)
    entropy = -sum(c / total * math.log(c / total) for c in counts.values())
    return Blind(entropy, True, max(counts.values()) / total)


def top_logprob(task: Any, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
    """log(top probability) laid out like the labels, by the label convention (as ``outputs.aligned_predictions``
    lays out the argmax); None if the logits do not fit the labels."""
    if logits.dim() == 2 and labels.dim() == 1 and logits.shape[0] == labels.shape[0]:
        return logits.float().log_softmax(-1).max(-1).values
    if logits.dim() != labels.dim() + 1 or tuple(logits.shape[:-1]) != tuple(labels.shape):
        return None
    top = logits.float().log_softmax(-1).max(-1).values
    if task.label_convention == "shift_in_loss" and top.dim() == 2:
        shifted = torch.zeros_like(top)
        shifted[:, 1:] = top[:, :-1]
        return shifted
    return top


@torch.no_grad()
def accuracy(tr: Trainer, examples: list[Example]) -> Fit | None:
    """The fit's predictions on the subset (see :class:`Fit`); None: no predictions to compare."""
    task = tr.task
    was = tr.model.training
    tr.model.eval()
    right = total = 0
    top_sum: float | None = 0.0
    wrong: list[Any] = []
    try:
        for i in range(0, len(examples), tr.microbatch):
            part = examples[i : i + tr.microbatch]
            batch = tr.collate(part)
            lab = batch.get(task.label_key)
            if torch.is_tensor(lab) and lab.dtype.is_floating_point:
                return None  # real-valued targets: no prediction is "right"; the loss and the pairing decide
            if not torch.is_tensor(lab):
                return None
            top: torch.Tensor | None = None
            if task.predict is not None:
                pred = tr.predictions(batch)
            else:  # the argmax of the logits, and how confident it is, from one forward
                with outputs.capture(tr.model) as cap:
                    tr.loss_call(batch, net=tr.model)
                logits = cap.logits
                pred = outputs.aligned_predictions(task, logits, lab) if logits is not None else None
                top = top_logprob(task, logits, lab) if logits is not None else None
            if pred is None or pred.numel() != lab.numel():
                return None
            pred = pred.reshape(lab.shape)
            keep = lab != task.ignore_index
            if task.label_convention == "shift_in_loss" and lab.dim() >= 2:
                keep[:, 0] = False  # nothing predicts the first label: the loss drops it too
            hit = (pred == lab) & keep
            right += int(hit.sum())
            total += int(keep.sum())
            if top is None or top_sum is None:
                top_sum = None
            else:
                top_sum += float(-top.reshape(lab.shape)[keep].sum())
            ok = rows(hit | ~keep).all(1).tolist()
            wrong += [e.get("id") for e, o in zip(part, ok, strict=False) if not o]
    finally:
        tr.model.train(was)
    if total == 0:
        return None
    return Fit(right / total, total, wrong, None if top_sum is None else top_sum / total)


@torch.no_grad()
def paired_losses(tr: Trainer, mbs: list[list[Example]]) -> tuple[float, float, str] | str:
    """(the fitted loss, the loss with each row's input paired with the next row's everything else, the keys moved),
    under one replayed RNG state; or why it cannot be measured. A model whose output ignores its input gives the
    same for both (a contrastive model collapsed to uniform scores, a pooled token that is the same in every row)."""
    key = tr.task.input_key
    fitted = shuffled = 0.0
    moved: list[str] = []
    for mb in mbs:
        batch = tr.collate(mb)
        x = batch.get(key)
        if not torch.is_tensor(x) or x.dim() == 0 or x.shape[0] < 2:
            return f"no batch[{key!r}] with two rows or more to pair with other rows (Task.input_key)"
        moved = [k for k, v in batch.items() if torch.is_tensor(v) and tuple(v.shape) == tuple(x.shape)]
        rest = [k for k, v in batch.items() if torch.is_tensor(v) and v.dim() and v.shape[0] == x.shape[0]]
        if not set(rest) - set(moved):
            return (
                f"every tensor of the batch is shaped like batch[{key!r}]: nothing else (a target, another view) "
                "to pair the input with"
            )
        start = rng_state()
        for rolled, into in ((False, "fitted"), (True, "shuffled")):
            b = dict(batch)
            if rolled:
                b.update({k: torch.roll(batch[k], 1, dims=0) for k in moved})
            set_rng_state(start)
            value, count = tr.loss_of(b)
            v = float(value) / float(count) if count is not None else float(value)
            if into == "fitted":
                fitted += v / len(mbs)
            else:
                shuffled += v / len(mbs)
    return fitted, shuffled, ", ".join(moved)


def reads_input(paired: tuple[float, float, str] | str, noise: float) -> bool:
    """The fitted loss is clearly lower than with inputs paired to other rows (or that cannot be measured)."""
    if isinstance(paired, str):
        return True
    fitted, shuffled, _ = paired
    return shuffled - fitted > max(3 * noise, 0.05 * abs(fitted), 1e-6)
