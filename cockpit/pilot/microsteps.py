"""One update's forward and backward over its microbatches, written once.

:meth:`Trainer.accumulate` walks every microbatch in one go; the pilot's
first update walks the same loop one half-step at a time, so that the forward
and the backward of its first microbatch are measured as phases of their own
(see :mod:`.phases.steps`). Both go through :class:`Accumulation`, so the loss
scaling, the DDP ``no_sync`` bounds and the normalisation by the count are
written in one place.

Under DDP, gradients are all-reduced only on an update's last microbatch.
``no_sync`` must hold the *forward* too: DDP prepares its reducer at the end of
the forward, so a ``no_sync`` entered only around ``backward()`` (as an earlier
copy of this loop did) still all-reduced every microbatch. It is entered and
left in one ``with`` in :meth:`Accumulation._walk`, which stays open between
the two half-steps while a phase measures them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from ..contract import Batch, Example

if TYPE_CHECKING:  # typing.NotRequired is Python 3.11; annotations here are never evaluated
    from typing import NotRequired

import torch

from .order import Position
from .outputs import LossOut
from .unregistered import Stray
from .usercode import NonFinite, UserCodeError


class Stepper(Protocol):
    """What the loop needs of a trainer (:class:`cockpit.pilot.trainer.Trainer` is the one there is)."""

    model: Any  # the bare module
    ddp: Any  # the DDP wrapper when distributed, else None
    optimizer: Any
    scaler: torch.amp.GradScaler | None
    step: int
    world: int

    def collate(self, examples: list[Example]) -> Batch: ...

    def loss_call(self, batch: Batch, net: Any = None) -> LossOut: ...

    def reduce_count(self, count: float) -> float: ...


class Accumulated(TypedDict):
    """What one update's forward and backward passes gave: the update's loss, its examples (over every rank)
    and the count the loss was normalised by (None for a mean loss)."""

    loss: float
    examples: int
    count: float | None


class Applied(TypedDict):
    """What an optimizer step gave: the gradient norm before it (None when not finite) and the learning rate."""

    grad_norm: float | None
    lr: float


class Updated(Accumulated, Applied):
    """One whole update: its loss and examples, the optimizer step's figures, and the step count after it."""

    step: int


class Evaluated(TypedDict):
    """One pass over a split in eval mode: its loss, the ids it saw in order, its rows, and whether the model was
    in training mode before (it is put back so)."""

    loss: float
    ids: list[Any]
    n: int
    was_training: bool


class ControlOutputs(TypedDict):
    """What an export must reproduce on the control inputs: the loss, the predictions and the generated text."""

    loss: torch.Tensor
    predictions: torch.Tensor
    generated: NotRequired[list[str]]


class Saved(TypedDict):
    """What the save phase wrote, for the resume phase to find again in a new process."""

    step: int
    lr: float
    data: Position


class ChildFound(TypedDict, total=False):
    """What a new process reports (``resume.json``, ``replay.json``): the resume fields, or the replay ones."""

    pid: int
    elapsed_s: float
    # resume: the state it restored, the losses of its next updates, its peak
    step: int
    lr: float
    data: Position
    losses: list[float]
    peak: int
    # replay: whether the export reloaded safely and reproduced its control outputs
    safe: bool
    weights: str
    loaded: str
    equal: bool
    detail: str
    generated: list[str]


@dataclass
class Forward:
    """One microbatch's loss, taken and not yet back-propagated."""

    index: int
    batch: Batch
    loss: LossOut


@dataclass
class Totals:
    """The loss of the update so far: a sum and a count when the loss says how many items it sums, else one mean
    per microbatch."""

    loss_sum: float = 0.0
    count: float | None = None
    means: list[float] = field(default_factory=list)
    examples: int = 0

    def loss(self) -> float:
        if self.count is not None:
            return self.loss_sum / max(self.count, 1e-12)
        return sum(self.means) / max(len(self.means), 1)


class Accumulation:
    """The microbatches of one update, forward then backward each, in order.

    ``forward()`` takes the next microbatch's loss; ``backward()`` back-propagates it; ``rest()`` does both for
    every microbatch left; ``finish()`` unscales the gradients, normalises a summed loss by its count and says
    what the update's loss was. ``close()`` leaves an unfinished microbatch (a phase that stops before its
    backward), leaving DDP's ``no_sync`` on the way out.
    """

    def __init__(
        self,
        trainer: Stepper,
        microbatches: list[list[Example]],
        *,
        weights: list[float] | None = None,
        check_finite: bool = True,
    ) -> None:
        self.trainer = trainer
        self.microbatches = microbatches
        self.weights = weights
        self.check_finite = check_finite
        self.totals = Totals()
        self._steps = self._walk()
        self._pending: Forward | None = None
        self.taken = 0  # microbatches back-propagated so far

    def _walk(self) -> Generator[Forward | None, None, None]:
        tr = self.trainer
        n = len(self.microbatches)
        for i, mb in enumerate(self.microbatches):
            batch = tr.collate(mb)
            sync = tr.ddp.no_sync() if (tr.ddp is not None and i < n - 1) else contextlib.nullcontext()
            with sync:
                lo = tr.loss_call(batch)
                yield Forward(i, batch, lo)
                self._back(i, lo, len(mb))
            yield None

    def _back(self, i: int, lo: LossOut, examples: int) -> None:
        tr, t = self.trainer, self.totals
        value, count = lo.value, lo.count
        if value.numel() != 1:  # the task's loss is per item: Cockpit cannot take it as the loss it is
            raise UserCodeError(
                "loss",
                ValueError(
                    f"the loss is not a scalar: shape {tuple(value.shape)}; reduce it with .mean() "
                    "(or return (sum, count) for a sum over items)"
                ),
            )
        v = float(value.detach())
        if self.check_finite and not math.isfinite(v):
            raise NonFinite("loss", v, tr.step + 1)
        t.examples += examples
        self.taken += 1
        if count is None:
            scaled = value * self.weights[i] if self.weights is not None else value / len(self.microbatches)
            t.means.append(v)
        else:
            scaled = value
            t.loss_sum += v
            t.count = (t.count or 0.0) + float(count)
        if tr.scaler is not None:
            scaled = tr.scaler.scale(scaled)
        backward: Callable[[], None] = scaled.backward  # torch leaves Tensor.backward unannotated
        backward()

    def forward(self) -> Forward:
        """The next microbatch's loss (under ``no_sync`` when it is not the update's last)."""
        step = next(self._steps)
        if step is None:  # a backward() was skipped: the walk is out of step with its caller
            raise RuntimeError("forward() called twice without backward()")
        self._pending = step
        return step

    def backward(self) -> None:
        """Back-propagate the microbatch ``forward()`` took, and leave its ``no_sync``."""
        if self._pending is None:
            raise RuntimeError("backward() called without forward()")
        done = next(self._steps)
        assert done is None
        self._pending = None

    def rest(self) -> None:
        """Forward and backward over every microbatch not yet taken."""
        if self._pending is not None:
            self.backward()
        for _ in range(len(self.microbatches) - self.taken):
            self.forward()
            self.backward()

    def close(self) -> None:
        """Stop here, leaving the current microbatch's ``no_sync``."""
        self._steps.close()
        self._pending = None

    def finish(self) -> Accumulated:
        """Unscale the gradients, divide a summed loss's gradients by its count, and say what the update gave."""
        tr, t = self.trainer, self.totals
        # The walk refers to this object and this object to the walk: closing it frees the last batch and loss
        # now, not at the next cyclic garbage collection (they would stay resident into the optimizer step).
        self.close()
        if tr.scaler is not None:
            tr.scaler.unscale_(tr.optimizer)
        if t.count is not None:
            per_rank = tr.reduce_count(t.count)
            for p in tr.model.parameters():
                if p.grad is not None:
                    p.grad.div_(per_rank)
        return {"loss": t.loss(), "examples": t.examples * tr.world, "count": t.count}


@dataclass
class FirstUpdate:
    """What the pilot's first update hands from its forward phase to its backward and optimizer-step phases, and
    on to the second update: the parameters' fingerprints before it, its microbatches, the accumulation under way,
    and the parameters whose whole first gradient was exactly zero (with their fingerprint after the step)."""

    before: dict[str, tuple[float, ...]]
    microbatches: list[list[Example]]
    accumulation: Accumulation
    zero_first: dict[str, tuple[float, ...]] = field(default_factory=dict)
    strays: list[Stray] | None = None  # tensors the first loss trains outside the model's parameters (None: unmeasured)
