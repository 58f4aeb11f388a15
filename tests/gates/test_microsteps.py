"""One accumulation loop: Trainer.accumulate and the pilot's first update walk the same microbatches the same way.

DDP's ``no_sync`` has to hold each non-final microbatch's forward *and* backward (DDP prepares its reducer at the end
of the forward); a stand-in ``ddp`` records the order in which things happen, on CPU, without a process group.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from cockpit.pilot.context import Context
from cockpit.pilot.microsteps import Accumulation
from cockpit.pilot.phases import BY_NAME
from cockpit.pilot.pilot import run_phase
from tests.gates.test_phases import PARAMS, classifier


class RecordingDDP:
    """Stands for DistributedDataParallel: records when no_sync is entered and left."""

    def __init__(self, log: list[str], model: torch.nn.Module) -> None:
        self.log = log
        self.module = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        self.log.append("enter")
        try:
            yield
        finally:
            self.log.append("exit")


def _recorded(ctx: Context, log: list[str]) -> None:
    tr = ctx.trainer
    tr.ddp = RecordingDDP(log, tr.model)
    real = tr.loss_call

    def loss_call(batch: dict[str, Any], net: Any = None) -> Any:
        lo = real(batch, net)
        log.append("loss")
        value = lo.value

        def hook(grad: torch.Tensor) -> torch.Tensor:
            log.append("backward")
            return grad

        value.register_hook(hook)
        return lo

    tr.loss_call = loss_call  # type: ignore[method-assign]


EXPECTED = ["enter", "loss", "backward", "exit", "enter", "loss", "backward", "exit", "loss", "backward"]


def _ctx(tmp_path: Any) -> Context:
    ctx = Context.in_memory(classifier(), {**PARAMS, "accumulation": 3}, rdir=tmp_path)
    g, ended = run_phase(ctx, BY_NAME["data"])
    assert ended is None, g
    return ctx


def test_accumulate_holds_forward_and_backward_under_no_sync(tmp_path: Any) -> None:
    ctx = _ctx(tmp_path)
    log: list[str] = []
    tr = ctx.trainer
    tr.build()
    _recorded(ctx, log)
    out = tr.accumulate(tr.next_microbatches())
    assert log == EXPECTED  # an earlier copy entered no_sync after the forward, so DDP still all-reduced
    assert out["examples"] == 3 * PARAMS["microbatch"] and out["count"] is None


def test_first_update_phases_walk_the_same_loop(tmp_path: Any) -> None:
    ctx = _ctx(tmp_path)
    log: list[str] = []
    # the forward phase builds the trainer's model: record from its first microbatch on
    ctx.trainer.build()
    _recorded(ctx, log)
    built = ctx.trainer.build
    ctx.trainer.build = lambda allow_frozen=False: None  # type: ignore[method-assign]
    for name in ("forward", "backward", "update_first"):
        g, ended = run_phase(ctx, BY_NAME[name])
        assert ended is None and g.verdict in ("pass", "warn"), (name, g.checks)
    ctx.trainer.build = built  # type: ignore[method-assign]
    assert log == EXPECTED


def test_phases_and_accumulate_give_the_same_gradients(tmp_path: Any) -> None:
    ctx = _ctx(tmp_path)
    tr = ctx.trainer
    tr.build()
    mbs = tr.next_microbatches()
    torch.manual_seed(0)
    tr.accumulate(mbs)
    whole = [p.grad.clone() for p in tr.model.parameters() if p.grad is not None]
    tr.optimizer.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    acc = Accumulation(tr, mbs)
    acc.forward()
    acc.backward()
    acc.rest()
    out = acc.finish()
    halves = [p.grad for p in tr.model.parameters() if p.grad is not None]
    assert len(whole) == len(halves) > 0
    assert all(torch.equal(a, b) for a, b in zip(whole, halves, strict=True))
    assert out["loss"] > 0


def test_close_leaves_no_sync(tmp_path: Any) -> None:
    ctx = _ctx(tmp_path)
    log: list[str] = []
    tr = ctx.trainer
    tr.build()
    _recorded(ctx, log)
    acc = Accumulation(tr, tr.next_microbatches())
    acc.forward()
    acc.close()  # the backward phase stops here when nothing trains
    assert log == ["enter", "loss", "exit"]


def test_nothing_of_the_update_stays_resident_after_it(tmp_path: Any) -> None:
    """The walk and its Accumulation refer to each other: without closing the walk, the last microbatch's loss
    (and its batch) stayed alive until the next cyclic garbage collection, into the optimizer step."""
    import gc
    import weakref

    ctx = _ctx(tmp_path)
    tr = ctx.trainer
    tr.build()
    refs: list[weakref.ref[torch.Tensor]] = []
    real = tr.loss_call

    def loss_call(batch: dict[str, Any], net: Any = None) -> Any:
        lo = real(batch, net)
        refs.append(weakref.ref(lo.value))
        return lo

    tr.loss_call = loss_call  # type: ignore[method-assign]
    gc.disable()
    try:
        tr.accumulate(tr.next_microbatches())
        assert len(refs) == 3 and all(r() is None for r in refs)
    finally:
        gc.enable()
