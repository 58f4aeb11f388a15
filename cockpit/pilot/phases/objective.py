"""What the objective implies the loss should be: the loss the model's own output gives by a recognised form.

Cockpit captures the model's output (its logits) and the batch holds the targets, so the loss a standard
objective gives on them can be computed beside the user's: the mean cross-entropy of the logits over integer
targets (laid out by the measured label convention, without ignored positions), or the mean squared error of
an output shaped like real-valued targets. Comparing the two says which form the user's loss took (that one,
a multiple of it: a sum where a mean was meant, or the cross-entropy of ``softmax(logits)``: a double softmax)
and what is left over (an extra term). The references follow from the form: ln C for uniform predictions over
C classes and the entropy of the batch's targets for a model that ignores its input (cross-entropy), the
variance of the targets for a model that predicts their mean (squared error).

A cross-entropy over probabilities (softmax applied twice) cannot go below ``ln(e + C - 1) - 1``: at best one
probability is 1 and the others 0, and softmax of that puts ``e / (e + C - 1)`` on the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..task import Task


@dataclass(frozen=True)
class Implied:
    """The standard losses of the model's output against the batch's targets (None: that form does not apply).

    ``ce``: mean cross-entropy of the logits; ``ce_softmaxed``: of ``softmax(logits)`` (a double softmax);
    ``ce_unit``: of the logits rescaled to a standard deviation of 1 across classes; ``spread``: that standard
    deviation (mean over positions); ``entropy``: of the targets (the loss of predicting their frequencies);
    ``mse``: mean squared error of an output shaped like real-valued targets, ``variance``: the targets'
    variance (the squared error of predicting their mean), ``mean``: their mean."""

    count: int  # targets that count (supervised positions, or target elements)
    rows: int  # rows of the batch
    classes: int | None = None
    ce: float | None = None
    ce_softmaxed: float | None = None
    ce_unit: float | None = None
    spread: float | None = None
    entropy: float | None = None
    mse: float | None = None
    variance: float | None = None
    mean: float | None = None
    bce: float | None = None  # targets in [0, 1]: the mean binary cross-entropy with logits of the output
    sigmoid: bool = False  # the output is a sigmoid's (its last operation; without a graph: every value in [0, 1])

    @property
    def main(self) -> float | None:
        """The form's own loss: the cross-entropy of the logits, else the squared error."""
        return self.ce if self.ce is not None else self.mse

    @property
    def form(self) -> str:
        return "the mean cross-entropy of the logits" if self.ce is not None else "the mean squared error"


PASSING = frozenset(
    {"ToCopyBackward0", "ViewBackward0", "CloneBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0"}
)


def ends_in_sigmoid(output: torch.Tensor) -> bool:
    """Whether the model's last operation on its output was a sigmoid (casts and views passed through); an output
    without a graph: whether every value lies in [0, 1]."""
    fn = output.grad_fn
    if fn is None:
        out = output.detach()
        return bool(((out >= 0) & (out <= 1)).all())
    while type(fn).__name__ in PASSING and fn.next_functions and fn.next_functions[0][0] is not None:
        fn = fn.next_functions[0][0]
    return type(fn).__name__ == "SigmoidBackward0"


def double_sigmoid_floor(positive_share: float) -> float:
    """The lowest binary cross-entropy with logits over ``sigmoid(p)``, p in [0, 1]: a positive target at best sees
    sigmoid(1), a negative one sigmoid(0)."""
    return positive_share * math.log1p(math.exp(-1.0)) + (1 - positive_share) * math.log(2.0)


def double_softmax_floor(classes: int) -> float:
    """The lowest cross-entropy over ``softmax(p)`` for probabilities ``p`` over ``classes`` classes."""
    return math.log(math.e + classes - 1) - 1


def laid_out(task: Task, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(scores [N, C], targets [N]) of the positions that count, by the label convention; None if they do not fit."""
    if logits.dim() == 2 and labels.dim() == 1 and logits.shape[0] == labels.shape[0]:
        x, y = logits, labels
    elif logits.dim() == labels.dim() + 1 and tuple(logits.shape[:-1]) == tuple(labels.shape) and labels.dim() >= 2:
        if task.label_convention == "shift_in_loss":
            x, y = logits[:, :-1], labels[:, 1:]
        else:
            x, y = logits, labels
    else:
        return None
    x, y = x.reshape(-1, x.shape[-1]), y.reshape(-1)
    keep = y != task.ignore_index
    x, y = x[keep], y[keep]
    if not len(y) or int(y.min()) < 0 or int(y.max()) >= x.shape[-1]:
        return None
    return x, y


@torch.no_grad()
def implied(task: Task, output: torch.Tensor | None, batch: dict[str, object]) -> Implied | None:
    """The standard losses of ``output`` (the captured logits) against ``batch[task.label_key]``; None where no
    recognised form applies (no targets, or an output that does not line up with them)."""
    labels = batch.get(task.label_key)
    if output is None or not torch.is_tensor(labels) or not output.is_floating_point() or labels.dim() == 0:
        return None
    out = output.detach().float()
    rows = int(labels.shape[0])
    if labels.is_floating_point():
        if out.numel() != labels.numel() or out.shape[0] != labels.shape[0]:
            return None
        y = labels.detach().float().reshape(out.shape)
        binary = bool(((y >= 0) & (y <= 1)).all())
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        return Implied(
            count=y.numel(),
            rows=rows,
            mse=float((out - y).pow(2).mean()),
            variance=float(y.var(unbiased=False)),
            mean=float(y.mean()),
            bce=float(bce(out, y)) if binary else None,
            sigmoid=ends_in_sigmoid(output),
        )
    if labels.dtype == torch.bool or out.dim() < 2 or out.shape[-1] < 2:
        return None
    pair = laid_out(task, out, labels)
    if pair is None:
        return None
    x, y = pair
    classes = x.shape[-1]
    spread = x.std(-1, unbiased=False).clamp_min(1e-12)
    _, counts = torch.unique(y, return_counts=True)
    freq = counts.float() / len(y)
    return Implied(
        count=len(y),
        rows=rows,
        classes=classes,
        ce=float(torch.nn.functional.cross_entropy(x, y)),
        ce_softmaxed=float(torch.nn.functional.cross_entropy(x.softmax(-1), y)),
        ce_unit=float(torch.nn.functional.cross_entropy(x / spread[:, None], y)),
        spread=float(spread.mean()),
        entropy=float(-(freq * freq.log()).sum()),
    )


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-3)


def softmaxed(loss: float, ce: float, ce_softmaxed: float, rel: float) -> bool:
    """The loss is the cross-entropy of ``softmax(logits)`` and clearly not of the logits: it matches the first
    within ``rel`` and is at least 20 times (and 0.05 nats) further from the second."""
    gap = abs(loss - ce_softmaxed)
    return close(loss, ce_softmaxed, rel) and abs(loss - ce) > max(0.05, 20 * gap)


def multiple(loss: float, base: float, im: Implied, rel: float) -> tuple[float, str] | None:
    """(the factor, what it counts) when ``loss`` is ``base`` times the targets, rows or targets per row."""
    if base <= 0 or loss <= 0:
        return None
    candidates = [(float(im.count), "targets that count in the microbatch"), (float(im.rows), "rows")]
    if im.rows and im.count % im.rows == 0 and im.count // im.rows not in (1, im.rows):
        candidates.append((float(im.count // im.rows), "targets per row"))
    for k, what in candidates:
        if k > 1.5 and close(loss, k * base, rel):
            return k, what
    return None


@torch.no_grad()
def logit_scale(task: Task, output: torch.Tensor | None, batch: dict[str, object], loss: float) -> float | None:
    """The factor s > 1.5 such that the mean cross-entropy of ``s * logits`` is ``loss`` (a scale applied inside
    the loss: ``cross_entropy(100 * logits, y)``), found on a geometric grid and refined by bisection; None when
    no such factor up to 10^4 gives it within 0.5 %."""
    labels = batch.get(task.label_key)
    if output is None or not torch.is_tensor(labels) or labels.is_floating_point() or output.dim() < 2:
        return None
    pair = laid_out(task, output.detach().float(), labels)
    if pair is None:
        return None
    x, y = pair

    def ce(s: float) -> float:
        return float(torch.nn.functional.cross_entropy(s * x, y))

    grid = [10 ** (k / 10) for k in range(2, 41)]  # 1.58 .. 10^4
    prev = grid[0]
    if ce(prev) > loss:
        return None
    for s in grid[1:]:
        if ce(s) >= loss:
            lo, hi = prev, s
            for _ in range(40):
                mid = math.sqrt(lo * hi)
                lo, hi = (mid, hi) if ce(mid) < loss else (lo, mid)
            found = math.sqrt(lo * hi)
            return found if close(ce(found), loss, 5e-3) else None
        prev = s
    return None


def gradient_is_ce(
    task: Task, output: torch.Tensor | None, batch: dict[str, object], loss: torch.Tensor, scale: float
) -> bool | None:
    """Whether the gradient of the user's (mean) ``loss`` with respect to the model's logits is that of the mean
    cross-entropy of ``scale * logits`` (cosine above 0.99, norms within 10 %): a scale inside the loss moves the
    gradient with it, an extra term that does not read the logits does not. None where it cannot be measured
    (no graph from the loss to the captured logits). Runs only when a scale is suspected: one partial backward
    to the logits, the graph kept for the real one."""
    labels = batch.get(task.label_key)
    if output is None or not torch.is_tensor(labels) or not output.requires_grad or not loss.requires_grad:
        return None
    try:
        (grad,) = torch.autograd.grad(loss, output, retain_graph=True, allow_unused=True)
    except RuntimeError:
        return None
    if grad is None:
        return False
    with torch.no_grad():
        pair, mine = laid_out(task, output.detach().float(), labels), laid_out(task, grad.float(), labels)
        if pair is None or mine is None:
            return None
        (x, y), (gu, _) = pair, mine
        want = scale * (torch.softmax(scale * x, -1) - torch.nn.functional.one_hot(y, x.shape[-1]).float()) / len(y)
        nu, nw = float(gu.norm()), float(want.norm())
        if nu == 0 or nw == 0:
            return False
        cos = float((gu * want).sum()) / (nu * nw)
        return cos > 0.99 and abs(nu / nw - 1) < 0.1
