"""Updates however a script makes them: an optimizer's step, or the parameters changed in place by hand.

An optimizer's step is seen by PyTorch's global step hooks. A script without an optimizer object
(``p.data.add_(p.grad, alpha=-lr)``, as hand-written SGD does) is seen by its effect: after a backward, the
parameters' version counters, and one small parameter compared element by element with its copy (``.data``
writes do not move the version counter), are read again where the script goes on (its next training
forward, an evaluation, a save, its end); a parameter that moved there was updated. The check runs only
while no optimizer has stepped, so a script with one pays nothing for it after its first update.

Also here, the update's other bookkeeping: the gradients must be zeroed between updates (one parameter the
optimizer holds is read before each backward during the watched steps: ``None`` or all zero means zeroed),
and every parameter that receives a gradient must be held by an optimizer.
"""

from __future__ import annotations

import math
import time

import torch

from .. import events as ev
from ..pilot.tensorscan import fingerprint
from . import phases as ph
from .bounds import Step
from .reading import optimizer_step_count, short_list
from .training import Training


class Updates(Training):
    """Counting updates (with or without an optimizer), and the checks between them."""

    def check_stop(self, at_step: bool = False) -> None:
        raise NotImplementedError  # the observer's: it ends the script once the probe has what it came for

    # ------------------------------------------------------------------ one update, however it was made

    def _stepped(self, opt: torch.optim.Optimizer | None, where: str = "") -> None:
        """After an update: count it, close or time its phase, send its step event, and maybe stop."""
        t_end = time.perf_counter()
        self.step += 1
        self.pending = False
        watched = self.watching()
        loss = self._loss_value() if watched or self.step % 10 == 0 else None
        self.losses = []
        st = Step(
            self.step,
            self.lr if opt is not None else None,
            loss,
            t_end - self.step_t0,
            optimizer_step_count(opt) if opt is not None and (watched or self.cfg.mode == "resume") else None,
            self.microbatches,
        )
        self.microbatches = 0
        self.closure_calls = 0
        self.steps.append(st)
        phase = self.open.name if self.open is not None else ("resume" if self.cfg.mode == "resume" else "train")
        if self.cfg.mode == "probe" and self.open is not None and self.open.name == ph.UPDATE_FIRST:
            if opt is not None:
                self._end_update_first(opt, st)
            else:
                self._end_manual_first(st, where)
            phase = ph.UPDATE_FIRST
        elif self.open is not None and self.open.name == ph.UPDATE_SECOND:
            self.timed.append(st.duration_s or 0.0)
        if self.cfg.mode == "probe" and watched:
            self._watch_zeroing(opt)
        self.emit(
            ev.STEP,
            step=st.number,
            loss=ev.finite_or_none(st.loss),
            lr=st.lr,
            grad_norm=None,
            examples=None,
            duration_s=st.duration_s,
            phase=phase,
            opt_step=st.opt_step,
            microbatches=st.microbatches,
        )
        if loss is not None and not math.isfinite(loss) and not self.diverged:
            self.diverged = {"phase": phase, "value": str(loss), "step": st.number}
            self.stop_reason = f"non-finite loss ({loss}) at step {st.number}"
        if self.cfg.mode == "probe":
            self._after_step(st)
        self.check_stop(at_step=True)
        self.step_t0 = time.perf_counter()

    def _loss_value(self) -> float | None:
        """The step's loss: the sum of what its backward calls received (with ``loss / accumulation``, the
        update's mean). One synchronize, on the steps that are watched only."""
        if not self.losses:
            return None
        with torch.no_grad():
            return float(torch.stack([x.float().reshape(()) for x in self.losses]).sum())

    def watching(self) -> bool:
        """Whether this step's loss and optimizer step count are read (a synchronize each)."""
        if self.cfg.mode == "resume":
            return True
        last = self.cfg.steps
        if self.cfg.resume and self.saves:
            last = max(last, self.saves[0]["step"] + self.cfg.compare_steps)
        return self.step <= last

    # ------------------------------------------------------------------ updates without an optimizer

    def _after_backward(self) -> None:
        """A backward ended: an update is due. Without an optimizer, what an in-place update would move is noted."""
        self.pending = True
        if self.optimizer is not None:
            return
        trainable = [p for _, p in self.named_parameters() if p.requires_grad]
        self.versions = [p._version for p in trainable]
        with_grad = [p for p in trainable if p.grad is not None]
        if with_grad:
            p = min(with_grad, key=lambda t: t.numel())
            self.sentinel = (p, p.detach().clone())

    def manual_check(self, where: str, final: bool = False) -> None:
        """Where the script goes on after a backward with no optimizer step: did it update the parameters itself?"""
        if self.optimizer is not None or not self.pending or self.in_step or (self.finished and not final):
            return
        trainable = [p for _, p in self.named_parameters() if p.requires_grad]
        moved = [p._version for p in trainable] != self.versions
        if not moved and self.sentinel is not None:
            p, copy = self.sentinel
            moved = not torch.equal(p.detach(), copy)
        if moved:
            self.sentinel = None
            self._stepped(None, where)

    def _end_manual_first(self, st: Step, where: str) -> None:
        o = self.end()
        g = o.gate
        named = self.named_parameters()
        after = fingerprint(named)
        trainable = [n for n, p in named if p.requires_grad]
        changed = [n for n in trainable if n in self.before and after[n] != self.before[n]]
        unchanged = [n for n in trainable if n not in changed]
        frozen = [n for n, p in named if not p.requires_grad]
        frozen_changed = [n for n in frozen if n in self.before and after[n] != self.before[n]]
        g.inputs.update({"optimizer": "none (an in-place update)", "microbatches": st.microbatches})
        g.check(
            "update seen",
            True,
            "no torch.optim optimizer stepped: the parameters changed in place after backward() (a hand-written "
            f"update, or an optimizer outside torch.optim), seen at {where or 'the next call'}",
        )
        g.check(
            "targeted parameters changed",
            bool(changed) and not unchanged,
            f"{len(changed)}/{len(trainable)} trainable tensors changed"
            + (f"; unchanged: {short_list(unchanged)}" if unchanged else ""),
            warn=bool(changed),
        )
        g.check(
            "frozen parameters unchanged",
            not frozen_changed,
            f"{len(frozen)} frozen, unchanged" if not frozen_changed else f"changed: {short_list(frozen_changed)}",
        )
        g.not_applicable(
            "optimizer holds every parameter with a gradient",
            "no optimizer object: the script updates the parameters itself",
        )
        self.before = {}
        self.record(o, duration=o.measure.duration_s)

    def no_update(self) -> None:
        """The script ended (or was stopped) with no update seen: a row that says what was seen, never a pass."""
        if ph.UPDATE_FIRST in self.done or ph.FORWARD not in self.done:
            return
        if self.open is not None and self.open.name == ph.UPDATE_FIRST:
            o = self.end()
            g = o.gate
            named = self.named_parameters()
            after = fingerprint(named)
            moved = [n for n, _ in named if n in self.before and after[n] != self.before[n]]
            opt = "an optimizer was built but never stepped" if self.optimizers else "no optimizer object was built"
            g.fail(
                "update seen",
                f"{self.backwards} backward() call{'s' if self.backwards != 1 else ''} and no update: {opt}, and "
                + (
                    "no parameter changed (compared element by element) from the first backward to the end"
                    if not moved
                    else f"{short_list(moved)} changed where the probe could not tell when (after the last forward)"
                ),
            )
            g.message = f"no update seen: {g.checks[-1]['detail']}"
            self.record(o)
            return
        self.skipped(ph.UPDATE_FIRST, f"never reached: {self.backwards} backward() calls, no optimizer step seen")

    # ------------------------------------------------------------------ gradients zeroed between updates

    def _watch_zeroing(self, opt: torch.optim.Optimizer | None) -> None:
        """After a watched update: the next ones' backward calls must find one held parameter's gradient zeroed."""
        if self.zero_param is None:
            if opt is not None:
                held = [p for group in opt.param_groups for p in group["params"] if p.grad is not None]
            else:
                held = [p for _, p in self.named_parameters() if p.requires_grad and p.grad is not None]
            if held:
                self.zero_param = min(held, key=lambda t: t.numel())
        if self.zero_pending and self.zero_backwards:
            self.not_zeroed.append(self.step)
        self.zero_pending = self.zero_param is not None
        self.zero_backwards = 0

    def _zeroed_before_backward(self) -> None:
        """Before a backward in the watched steps: were the gradients zeroed since the last update?"""
        if not self.zero_pending or self.zero_param is None:
            return
        self.zero_backwards += 1
        grad = self.zero_param.grad
        if grad is None or not bool(grad.any()):
            self.zero_pending = False
