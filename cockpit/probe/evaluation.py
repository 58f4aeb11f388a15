"""The evaluation as the probe sees it: where it starts and ends, and what its gate checks.

No script says it is evaluating, so a forward pass without grad, or with the module in eval mode, is
taken as one; the evaluation ends where training goes on (the next training forward, backward or
step). It sits above :mod:`.saving` because an evaluation starting closes a checkpoint still open.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from .. import events as ev
from ..pilot.gate import Gate
from . import phases as ph
from .bounds import Evaluation
from .reading import first_tensor
from .saving import Saving


class Evaluating(Saving):
    """The validation phase: opened, counted forward by forward, judged at its end."""

    def _start_evaluation(self) -> None:
        measured = self.cfg.mode == "probe" and ph.VALIDATION not in self.done
        if self.open is not None and self.open.name == ph.UPDATE_SECOND:
            self._interrupt_second()
        self._close_save()
        if self.open is not None:
            measured = False  # inside another phase's bounds (never expected): not measured
        self.evaluation = Evaluation(measured=measured)
        if measured:
            self.begin(ph.VALIDATION, {"step": self.step})

    def _eval_forward(self, module: torch.nn.Module, grad: bool, args: Any = ()) -> None:
        e = self.evaluation
        assert e is not None
        if next(module.parameters(), None) is None:
            return  # a loss module (no parameters): its training flag changes nothing
        if e.module is None:
            e.module = weakref.ref(module)
        ids = first_tensor(args, None)
        ids = ids if ids is not None and not grad and not ids.is_floating_point() and ids.dim() >= 1 else None
        if e.measured and ids is not None and e.last is not None and extends(e.last, ids):
            # generation: this forward's tokens are the last one's and one more (or the same window moved by one);
            # sampling between training steps is no evaluation, so its forwards are left out of the counts
            if e.last_counted is not None:
                e.forwards -= 1
                e.train_mode -= e.last_counted[0]
                e.with_grad -= e.last_counted[1]
                e.sampled += 1
                e.microbatch = None
            e.sampled += 1
            e.last, e.last_counted = ids, None
            return
        e.last = ids if e.measured else None
        e.forwards += 1
        e.last_counted = (int(module.training), int(grad))
        e.train_mode += int(module.training)
        e.with_grad += int(grad)
        e.trailing = e.trailing + 1 if grad else 0
        e.trailing_eval = e.trailing_eval + int(not module.training) if grad else 0

    def _end_evaluation(self, module: torch.nn.Module | None, by_backward: bool = False) -> None:
        """The evaluation ends where training goes on: ``module`` is the next training forward's root; a
        backward ends it after forwards with grad enabled that were training's (in eval mode, if left so)."""
        e, self.evaluation = self.evaluation, None
        if e is None or not e.measured or self.open is None or self.open.name != ph.VALIDATION:
            return
        left_in_eval = 0
        if by_backward and e.trailing:  # the forwards the backward differentiates were training, not evaluation
            e.forwards -= e.trailing
            e.with_grad -= e.trailing
            e.train_mode -= e.trailing - e.trailing_eval
            left_in_eval = e.trailing_eval
        if e.forwards == 0:
            # only parameter-free modules (a loss computed under no_grad), or only generation (samples printed
            # between steps): no evaluation, and the next one is measured instead
            self.abandon()
            if e.sampled:
                self.log(f"{e.sampled} forward passes generated tokens one by one (sampling): not taken for validation")
            return
        o = self.end()
        g = o.gate
        g.inputs.update({"forwards": e.forwards, "microbatch": e.microbatch})
        if e.sampled:
            g.inputs["sampling_forwards"] = e.sampled
        model = e.module() if e.module is not None else None
        self.eval_modes = self.mode_reading(model) if model is not None else None
        if e.train_mode and self.eval_modes is not None and not self.eval_modes.matters:
            g.not_applicable(
                "eval mode",
                f"{e.train_mode} of {e.forwards} forward passes ran in training mode, but "
                f"{self.eval_modes.words}: the mode changes nothing",
            )
        else:
            g.check(
                "eval mode",
                e.train_mode == 0,
                "the model was in eval mode"
                if e.train_mode == 0
                else f"{e.train_mode} of {e.forwards} forward passes ran in training mode"
                + (f"; {self.eval_modes.words}" if self.eval_modes is not None else "")
                + ": call model.eval() before evaluating",
            )
        g.check(
            "no grad",
            e.with_grad == 0,
            "torch.no_grad()"
            if e.with_grad == 0
            else f"{e.with_grad} of {e.forwards} forward passes recorded gradients: evaluate under torch.no_grad() "
            "(activations are kept for nothing)",
        )
        if e.losses:
            v = float(torch.stack([x.float().reshape(()) for x in e.losses]).mean())
            g.check("finite loss", math.isfinite(v), f"val loss {v:.4f}")
            g.extra["val_loss"] = ev.finite_or_none(v)
            self.emit(ev.EVAL, step=self.step, loss=ev.finite_or_none(v), metrics={})
        if left_in_eval:
            self._mode_check(g, False)
        elif module is not None:
            self._mode_check(g, module.training)
        else:
            # a save (or a step) ended it: the next training forward says whether train mode came back
            o.load = o.cpu.stop()
            self.held_validation = o
            return
        self.record(o)

    def _mode_check(self, g: Gate, training: bool) -> None:
        modes = self.eval_modes
        if not training and modes is not None and not modes.matters:
            g.not_applicable(
                "training mode restored",
                f"the next training forward ran in eval mode, but {modes.words}: the mode changes nothing",
            )
            return
        g.check(
            "training mode restored",
            training,
            "the next training forward ran in train mode"
            if training
            else "the next training forward after the evaluation ran in eval mode (dropout off, batch norm frozen): "
            "call model.train() after evaluating",
        )

    def _release_validation(self, module: torch.nn.Module | None) -> None:
        """The first training forward after an evaluation that a save ended (``None``: the script's end)."""
        o = self.held_validation
        if o is None or (module is not None and next(module.parameters(), None) is None):
            return
        self.held_validation = None
        if module is None:
            o.gate.not_applicable("training mode restored", "no training forward after the evaluation was watched")
        else:
            self._mode_check(o.gate, module.training)
        self.record(o)


def extends(last: torch.Tensor, ids: torch.Tensor) -> bool:
    """``ids`` continues ``last`` as generation does: the same tokens and one more, or the same window moved by one
    (a context cropped to the block size). Token ids only; one comparison of two small tensors."""
    if ids.dim() != last.dim() or ids.shape[:-1] != last.shape[:-1] or ids.device != last.device:
        return False
    n, m = last.shape[-1], ids.shape[-1]
    if m == n + 1:
        return bool(torch.equal(ids[..., :-1], last))
    if m == n and n > 1:
        return bool(torch.equal(ids[..., :-1], last[..., 1:]))
    return False
