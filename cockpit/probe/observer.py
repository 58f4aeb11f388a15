"""What the instrumentation makes of a training script's calls: its phases, measured and judged from outside.

Runs inside the script's own interpreter. :mod:`.instrument` calls it from PyTorch's global hooks
(a root module's forward, the loss's backward, every optimizer's step, ``torch.save``/``torch.load``);
it opens and closes each phase within the pilot's bounds (``cockpit.pilot.meter``: synchronize,
reset the peak counters, read them at the end) and sends the phase's gate to the run process.

The phases, as a script goes through them:

- ``stack`` at the first forward pass: the interpreter, torch, the device the model lives on; its
  measurement covers the script's start-up (model and data built);
- ``forward``: the first training forward pass (grad enabled) until its loss's ``backward()``;
- ``backward``: that backward call;
- ``update_first``: from the end of that backward to the end of the first optimizer step (the
  remaining microbatches of the update and the step, which allocates the optimizer state);
- ``update_second``: the later watched steps, each timed on its own (the median is the time per update);
- ``validation``: the first evaluation (forward passes without grad, or in eval mode);
- ``save``: the first checkpoint (every ``torch.save``/``safetensors`` call until training goes on).

The checks are those that can be judged from outside: a finite scalar loss, gradients on what trains
and none on what is frozen, the parameters the optimizer holds changed by the step and the frozen ones
not, eval mode and no grad during evaluation, checkpoint files written with their size and time.
Counters are read at phase bounds only; between them the hooks cost a few attribute checks.

The observer is one class built in layers, each a class the next one extends, so that each concern
reads on its own and calls only what lies below it: :mod:`.bounds` (the state and the meter's bounds
every phase is measured within), :mod:`.training` (what the training phases check when they close),
:mod:`.saving` (a checkpoint's files and the save gate), :mod:`.evaluation` (the validation gate; an
evaluation that starts closes a save, hence above it), and here the hooks :mod:`.instrument` calls,
which decide which phase opens and closes and when the script is stopped. ``save_begin`` is one of
them rather than part of :mod:`.saving` because a save that starts ends an evaluation.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Any

import torch

from ..pilot.tensorscan import fingerprint
from . import phases as ph
from .bounds import Config, Evaluation, FirstCall, Open, ProbeStop, Step
from .evaluation import Evaluating
from .modes import floats
from .reading import (
    batch_dim,
    describe_inputs,
    file_position,
    first_tensor,
    input_shapes,
    is_oom,
    loss_of,
    user_frame,
)
from .saving import SaveToken

__all__ = [
    "Config",
    "Evaluation",
    "Observer",
    "Open",
    "ProbeStop",
    "Step",
    "fingerprint",
    "is_oom",
    "user_frame",
]


class Observer(Evaluating):
    """The probe's state inside the script: which phase is open, what was seen, what is sent."""

    # ------------------------------------------------------------------ what the script does

    def forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        if self.in_backward or self.in_step or self.in_save or self.in_measure:
            return  # activation checkpointing recomputes forwards inside backward; an optimizer's own calls
        self.manual_check("the next forward pass")
        grad = torch.is_grad_enabled()
        ev_ = self.evaluation
        if ev_ is not None and (not grad or not module.training or next(module.parameters(), None) is None):
            self._count("forwards without grad or in eval mode", type(module).__name__)
            self._eval_forward(module, grad, args)
            return
        self._close_save()
        if grad:
            self._release_validation(module)
        self.check_stop()
        if ev_ is not None:
            self._end_evaluation(module)
        elif not grad:
            self._count("forwards without grad or in eval mode", type(module).__name__)
            self._start_evaluation()
            self._eval_forward(module, grad, args)
            return
        self._count("training forwards", type(module).__name__)
        self.root(module)
        if self.cfg.mode != "probe":
            return
        if self.step == 0 and ph.FORWARD not in self.done and self.open is None:
            self.step_t0 = time.perf_counter()
            self._stack(module, args)
            self.forward_inputs = {"module": type(module).__name__}
            n_all = sum(p.numel() for _, p in self.named_parameters())
            n_train = sum(p.numel() for _, p in self.named_parameters() if p.requires_grad)
            self.begin(ph.FORWARD, {"module": type(module).__name__, "parameters": n_all, "trainable": n_train})

    def forward_post(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if self.in_backward or self.in_step or self.in_save or self.in_measure:
            return
        ev_ = self.evaluation
        if ev_ is not None and ev_.measured:
            if ev_.microbatch is None and ev_.last_counted is not None:
                t = first_tensor(args, kwargs)
                found = batch_dim(module, args, kwargs, self.loader_sizes)
                ev_.microbatch = int(t.shape[found[0]]) if t is not None and found is not None else None
            loss = loss_of(output)
            if loss is not None:
                ev_.losses.append(loss.detach())
            return
        o = self.open
        if (
            o is not None
            and o.name == ph.FORWARD
            and self.first_call is None
            and next(module.parameters(), None) is not None
        ):
            self.first_call = FirstCall(
                weakref.ref(module), tuple(args), dict(kwargs or {}), [t.detach() for t in floats(output)]
            )
        if o is not None and o.name == ph.FORWARD and "shapes" not in o.gate.inputs:
            o.gate.inputs["shapes"] = input_shapes(args, kwargs)
            t = first_tensor(args, kwargs)
            found = batch_dim(module, args, kwargs, self.loader_sizes)
            if t is not None and t.dim() > 0 and found is not None:
                o.gate.inputs["microbatch"] = int(t.shape[found[0]])
                if found[0] != 0:
                    o.gate.inputs["batch_dim"] = found[0]
                    o.gate.inputs["batch_dim_from"] = found[1]

    def backward_begin(self, tensors: Any) -> bool:
        """Before ``torch.autograd.backward`` (the loss is the first tensor it is given); True when measured."""
        self._close_save()
        self.check_stop()
        if self.evaluation is not None:
            self._end_evaluation(None, by_backward=True)
        loss = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        loss = loss if isinstance(loss, torch.Tensor) else None
        self.backwards += 1
        self._count("backward() calls", "backward()")
        if self.closure_calls > 1:
            return False  # a closure re-evaluated within one step (LBFGS's line search): the same update
        if loss is not None and loss.numel() == 1:
            self.losses.append(loss.detach())
        self.microbatches += 1
        if self.cfg.mode == "probe":
            self._zeroed_before_backward()
        if self.cfg.mode != "probe" or self.open is None or self.open.name != ph.FORWARD:
            return False
        self._end_forward(loss)
        self.check_stop()  # a non-finite first loss ends the script here
        if loss is not None:
            self.take_local_grads(loss)  # outside the bounds: several ranks only, a few small tensors
        self.begin(ph.BACKWARD, dict(self.forward_inputs))
        return True

    def backward_end(self, measured: bool = True) -> None:
        if measured and self.open is not None and self.open.name == ph.BACKWARD:
            self._end_backward()
        if self.closure_calls <= 1:
            self._after_backward()

    def step_pre(self, opt: torch.optim.Optimizer, closure: bool = False) -> bool:
        """Before an optimizer's step; True when it is the one whose steps are counted."""
        if self.in_step:
            return False
        self.optimizers.add(opt)
        main = self.optimizer() if self.optimizer is not None else None
        if main is None:
            self.optimizer = weakref.ref(opt)
        elif main is not opt:
            return False  # a second optimizer (a GAN's other half): the first one counts the steps
        self._close_save()
        self.check_stop()
        if self.evaluation is not None:
            self._end_evaluation(None)
        self.in_step = True
        try:
            self.lr = float(opt.param_groups[0]["lr"]) if opt.param_groups else None
        except (TypeError, ValueError, KeyError):
            self.lr = None
        if self.cfg.mode == "probe" and self.open is not None and self.open.name == ph.FORWARD:
            o = self.end()  # gradients came without a backward() call Cockpit saw (torch.autograd.grad)
            o.gate.check("backward seen", False, "no backward() call before the optimizer step", warn=True)
            self.record(o)
        self.closure_calls = 0
        self._count("optimizer steps", f"{type(opt).__name__}.step()")
        first = self.cfg.mode == "probe" and self.step == 0 and ph.UPDATE_FIRST not in self.done
        if first and self.open is None and not closure:  # with a closure, its backward opens update_first
            self.before = fingerprint(self.named_parameters() + self._extra_params(opt))
            self.begin(ph.UPDATE_FIRST, {"microbatches": self.microbatches})
        return True

    def step_post(self, opt: torch.optim.Optimizer) -> None:
        main = self.optimizer() if self.optimizer is not None else None
        if main is not opt:
            return
        self.in_step = False
        self._stepped(opt)

    # ------------------------------------------------------------------ a save begins (the rest: .saving)

    def save_begin(self, target: object) -> SaveToken:
        """Before ``torch.save`` or a safetensors save; what :meth:`save_end` needs."""
        self.manual_check("a save")
        self._count("saves", "a save")
        if self.evaluation is not None:
            self._end_evaluation(None)
        # a file saved before the first optimizer step (a config, a vocabulary) is no checkpoint
        measured = self.cfg.mode == "probe" and ph.SAVE not in self.done and self.step >= 1
        if measured and (self.open is None or self.open.name != ph.SAVE):
            if self.open is not None and self.open.name == ph.UPDATE_SECOND:
                self._interrupt_second()
            if self.open is None:
                self.begin(ph.SAVE, {"step": self.step})
                self.burst = {"files": [], "bytes": 0, "seconds": 0.0, "calls": 0}
        path = os.fspath(target) if isinstance(target, (str, os.PathLike)) else None
        name = getattr(target, "name", None) if path is None else None  # open(path, "wb") as f: torch.save(m, f)
        return {
            "path": path,
            "name": name if isinstance(name, str) and os.path.isfile(name) else None,
            "target": target,
            "pos": file_position(target),
            "t0": time.perf_counter(),
        }

    # ------------------------------------------------------------------ the end

    def check_stop(self, at_step: bool = False) -> None:
        """End the script once it showed what the probe came for (never in watch-to-the-end mode)."""
        if self.finished or self.in_save:
            return
        if self.diverged:
            self._stop(self.stop_reason)
        cfg = self.cfg
        if cfg.mode == "resume":
            if self.step >= cfg.compare_steps:
                self._stop(f"the resumed script ran {self.step} steps")
            return
        if cfg.to_end or self.step < cfg.steps or (self.open is not None and self.open.name == ph.SAVE):
            return
        if self.saves:
            if cfg.resume:
                if at_step and self.step >= self.saves[0]["step"] + cfg.compare_steps:
                    self._stop(
                        f"stopped by the probe after {self.step} steps, a save at step {self.saves[0]['step']} "
                        f"and {cfg.compare_steps} steps after it to compare the resumed script with"
                    )
                return
            self._stop(f"stopped by the probe after {self.step} steps and one save (at step {self.saves[0]['step']})")
        elif self.step >= cfg.steps + cfg.save_within:
            self._stop(f"stopped by the probe after {self.step} steps: the script saved nothing")

    def _never_reached(self, why: str) -> None:
        for p in ph.TRAINING:
            if p not in self.done:
                self.skipped(p, f"never reached: {why}")

    def seen(self) -> str:
        """What the script was seen doing, for a phase it never reached."""
        parts = [f"{n} {what}" for what, n in self.counts.items() if n]
        text = "the probe saw " + (", ".join(parts) if parts else "no model call, backward, optimizer step or save")
        return text + (f"; the last was {self.last_call}" if self.last_call else "")

    def _stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        self.finish()
        self.send("stopping", reason=self.stop_reason)
        raise ProbeStop(self.stop_reason)

    def finish(self, exc: BaseException | None = None) -> None:
        """Close what is open and say what was never seen; once (from a stop or at the interpreter's exit)."""
        if self.finished:
            return
        self.finished = True
        if exc is None and not self.diverged:
            self.manual_check("the script's end", final=True)
        if self.evaluation is not None:
            self._end_evaluation(None)
        self._release_validation(None)
        if exc is None and not self.diverged and self.cfg.mode == "probe":
            self.no_update()
        o = self.open
        if o is not None and exc is not None:
            g = self.end().gate
            if is_oom(exc):
                first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                g.fail("memory", f"out of memory: {first}")
                g.message = f"out of memory in {o.name} with inputs {describe_inputs(g.inputs)}"
            else:
                g.fail("script", f"{type(exc).__name__}: {str(exc)[:300]} ({user_frame(exc)})")
                g.message = (
                    f"the script raised {type(exc).__name__} in {o.name}: {str(exc)[:300]} ({user_frame(exc)}); "
                    "full traceback in output.log"
                )
                g.remedy = f"fix the script where it raised ({user_frame(exc)}): the traceback is in output.log"
            self.record(o)
        elif o is not None and o.name == ph.SAVE:
            self._close_save()
        elif o is not None and o.name == ph.UPDATE_SECOND and self.timed:
            self._end_second()
        elif o is not None:
            self.abandon()
        if self.cfg.mode != "probe":
            return
        n = self.step
        if exc is not None or self.diverged:
            how = f"the script raised {type(exc).__name__}" if exc is not None else "the loss was not finite"
            self._never_reached(f"{how} before it; {self.seen()}")
            return
        if ph.FORWARD not in self.done:
            self._never_reached(f"no training forward (grad enabled, a model in train mode) was seen; {self.seen()}")
            return
        if ph.UPDATE_SECOND not in self.done and ph.UPDATE_FIRST in self.done:
            self.skipped(ph.UPDATE_SECOND, f"the script ended after {n} optimizer step{'s' if n != 1 else ''}")
        if ph.VALIDATION not in self.done:
            self.skipped(
                ph.VALIDATION,
                f"no evaluation seen in {n} optimizer step{'s' if n != 1 else ''} (a forward pass without grad or in "
                "eval mode); evaluate earlier, or probe with to_end to watch the script to its end",
            )
        if ph.SAVE not in self.done:
            self.skipped(
                ph.SAVE,
                f"the script saved nothing with torch.save or safetensors in {n} optimizer steps"
                + (
                    "" if self.cfg.to_end else f" (the probe waits {self.cfg.save_within} steps after the watched ones)"
                ),
            )
