"""The training phases' own work: what ``stack``, ``forward``, ``backward`` and the updates check.

Called by :mod:`.observer`'s hooks once they have decided a phase ends; the phase that follows a
backward or a step (``update_first``, the later-steps window) is opened here too, since only the end of
the one before knows whether it is due. The checks are those that can be judged from outside: a finite
scalar loss, gradients on what trains and none on what is frozen, the parameters the optimizer holds
changed by the step and the frozen ones not. The parameters are fingerprinted outside a phase's bounds,
so the copy's memory is never counted in the phase.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from .. import events as ev
from ..machine import CpuWatch, gpu_others
from ..pilot import tensorscan, unregistered
from ..pilot.gate import Gate
from ..pilot.meter import PhaseMeasure, stack_info
from ..pilot.stillness import classify
from ..pilot.tensorscan import fingerprint
from . import layers, modes, ranks
from . import phases as ph
from .bounds import Bounds, Open, Step
from .reading import first_tensor, read_peak_rss, short_list


class Training(Bounds):
    """The stack, forward, backward, update_first and update_second gates."""

    def _stack(self, module: torch.nn.Module, args: Any) -> None:
        """The stack gate, at the first training forward: the device is known from the model."""
        try:  # what the model holds outside its registries before any forward (unregistered.held)
            self.held_before = unregistered.held([module])
        except Exception:
            self.held_before = None
        p = next(module.parameters(), None)
        t = p if p is not None else first_tensor(args, None)
        self.device = t.device if t is not None else torch.device("cpu")
        if self.device.type == "cuda":
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            self.meter.device = self.device
        info = stack_info(self.device, self.meter.nvml)
        g = Gate(
            ph.STACK,
            {"device": str(self.device), "script_pid": os.getpid(), "python": sys.executable},
        )
        g.check("instrumented", True, f"{os.path.basename(sys.executable)} (pid {os.getpid()}) took Cockpit's probe")
        g.check("torch", True, f"torch {info['torch']} ({info['build']} build)")
        if self.device.type == "cuda":
            g.check("cuda", torch.cuda.is_available(), f"CUDA {info['cuda']}, driver {info['driver']}")
            others = gpu_others({os.getpid(), self.cfg.runner})
            held = sum(int(x.get("used") or 0) for x in others)
            g.check(
                "GPU memory free at start",
                not others,
                "no other process holds GPU memory"
                if not others
                else f"{held / 2**20:,.0f} MiB already held by other processes: NVML's figures include them",
                warn=True,
            )
            g.extra["gpu_others"] = others
        else:
            g.check("device", True, f"the model is on {self.device}: GPU counters are recorded as absent")
        g.extra["stack"] = info
        self.emit(ev.PHASE_START, phase=ph.STACK, inputs=g.inputs)
        mem = self.meter.read()  # start-up, never reset: the peak of building the model and the data
        o = Open(ph.STACK, g, None, PhaseMeasure(time.perf_counter() - self.t_start, mem), CpuWatch.start(), 0, False)
        peak = read_peak_rss()
        if peak is not None:
            mem["rss_peak"] = max(int(mem.get("rss_peak") or 0), peak)
        g.inputs["start_up_s"] = round(o.measure.duration_s, 3)
        self.record(o)

    def _end_forward(self, loss: torch.Tensor | None) -> None:
        o = self.end()
        g = o.gate
        if loss is None:
            g.check("loss is a scalar", False, "backward() was called on no tensor Cockpit could read")
        elif loss.numel() != 1:
            g.check(
                "loss is a scalar",
                False,
                f"backward() on a tensor of shape {tuple(loss.shape)} with an explicit gradient: the loss is not one number",
                warn=True,
            )
        else:
            v = float(loss.detach().float())
            g.check("loss is a scalar", True, f"{loss.dtype}")
            finite = math.isfinite(v)
            g.check("finite loss", finite, f"loss {v:.4f}" if finite else f"loss is {v}")
            g.extra["loss"] = ev.finite_or_none(v)
            if not finite:
                self.diverged = {"phase": ph.FORWARD, "value": str(v), "step": 1}
                self.stop_reason = f"non-finite loss ({v}) in the first forward pass"
        self.forward_inputs = {k: v for k, v in g.inputs.items() if k in ("microbatch", "shapes", "module")}
        if loss is not None and loss.grad_fn is not None:  # the graph, before backward frees it
            models = [m for m in (ref() for ref in self.roots.values()) if m is not None]
            try:  # an extra measurement inside the user's script: whatever stops it, the check says not applicable
                self.strays = unregistered.strays(models, loss, list(self.optimizers), self.held_before)
            except Exception:
                self.strays = None
        self.record(o)

    def _end_backward(self) -> None:
        o = self.end()
        g = o.gate
        named = self.named_parameters()
        trainable = [(n, p) for n, p in named if p.requires_grad]
        frozen = [(n, p) for n, p in named if not p.requires_grad]
        missing = [n for n, p in trainable if p.grad is None]
        with_grad = [(n, p) for n, p in trainable if p.grad is not None]
        bad: list[str] = []
        if with_grad:
            bad = [n for n, p in with_grad if not tensorscan.all_finite(p.grad)]  # type: ignore[arg-type]
        g.check(
            "every trainable parameter has a gradient",
            not missing,
            f"{len(trainable) - len(missing)}/{len(trainable)}"
            + (f"; none for {short_list(missing)} (detached from the loss, or unused)" if missing else ""),
            warn=True,  # a script may train parts in turn; the update's check says what moved
        )
        g.check(
            "finite gradients",
            not bad,
            "all finite" if not bad else f"non-finite in {short_list(bad)} (an fp16 grad scaler skips such a step)",
            warn=True,
        )
        frozen_grad = [n for n, p in frozen if p.grad is not None]
        g.check(
            "frozen parameters get no gradient",
            not frozen_grad,
            f"{len(frozen)} frozen, none with a gradient"
            if not frozen_grad
            else f"{short_list(frozen_grad)} have gradients",
        )
        if self.strays is None:
            g.not_applicable(unregistered.NAME, "the first loss's graph was not read")
        elif self.strays:
            g.check(unregistered.NAME, False, unregistered.describe(self.strays))
        else:
            g.check(
                unregistered.NAME,
                True,
                f"every tensor the loss trains is one of the {len(trainable)} trainable parameters",
            )
        self.record(o)
        self.read_modes()
        # The rest of the first update (its other microbatches and the step) is measured as update_first;
        # the parameters are fingerprinted before its bounds so the copy's memory is not counted in it.
        if self.step == 0 and ph.UPDATE_FIRST not in self.done:
            self.before = fingerprint(self.named_parameters())
            self.begin(ph.UPDATE_FIRST, {"microbatches": self.microbatches})

    def read_modes(self) -> None:
        """What training mode changes for the model, read once after the first backward, outside any phase's
        bounds (the first training batch run again in eval mode when the model's code says the mode may matter)."""
        call, self.first_call = self.first_call, None
        model = call.module() if call is not None else None
        if call is None or model is None:
            return
        rerun: torch.nn.Module | None = model
        if ranks.world_size() > 1:
            # one rank alone must run no collective: a DDP wrapper's forward may broadcast buffers, so its inner
            # module is run; a sharded model (FSDP, DeepSpeed) gathers inside forward, so it is read by its code only
            inner = getattr(model, "module", None)
            ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel) and isinstance(inner, torch.nn.Module)
            rerun = None if ranks.sharded([model]) else inner if ddp else model
        self.in_measure = True
        try:
            got = modes.reading(model, (call.args, call.kwargs, call.outputs) if rerun is not None else None, rerun)
        finally:
            self.in_measure = False
        self.modes[id(model)] = got
        self.modes.setdefault(type(model), got)

    def mode_reading(self, module: torch.nn.Module) -> modes.ModeReading:
        """What the mode changes for a module the script evaluates: read at the first training batch, else (an
        evaluation before any training, a model never trained) from its code alone."""
        got = self.modes.get(id(module)) or self.modes.get(type(module))
        if got is None:
            self.in_measure = True
            try:
                got = modes.reading(module, None)
            finally:
                self.in_measure = False
            self.modes[id(module)] = got
        return got

    def take_local_grads(self, loss: torch.Tensor) -> None:
        """Several ranks: this rank's own gradient for a few small tensors, before the script's first backward."""
        live = [m for m in (ref() for ref in self.roots.values()) if m is not None]
        self.in_measure = True
        try:
            self.local = ranks.local_grads(loss, self.named_parameters(), live)
        finally:
            self.in_measure = False

    def ranks_check(self, g: Gate, st: Step) -> None:
        """Several ranks: the first step's gradients must not be this rank's own, unaveraged."""
        local, self.local = self.local, None
        if local is None:
            return  # one process: nothing to average
        name = "gradients averaged across ranks"
        if local.skipped:
            g.not_applicable(name, local.skipped)
            return
        if st.microbatches != 1:
            g.not_applicable(
                name,
                f"the first update summed {st.microbatches} backward calls: its gradients are not one backward's to "
                "compare with this rank's own",
            )
            return
        same, differ = ranks.compared(local)
        if not same and not differ:
            g.not_applicable(name, "the compared tensors held no gradient at the step")
            return
        g.check(
            name,
            bool(differ),
            f"{len(differ)} of {len(differ) + len(same)} compared tensors' gradients differ from this rank's own: "
            f"averaged across the {local.world} ranks"
            if differ
            else f"the first step applied this rank's own gradients, unaveraged: {len(same)} of {len(same)} compared "
            f"tensors ({short_list(same)}) hold exactly the gradient of this rank's loss, so each of the "
            f"{local.world} ranks steps on its own and their models drift apart. DistributedDataParallel's "
            "all-reduce did not run: the model was moved or cast (.to, .cuda, .double) after DDP wrapped it (wrap "
            "it after moving), or the forward went through the bare module instead of the DDP wrapper (call the "
            "wrapper every step); or every rank saw the same batch (shard the data with a DistributedSampler)",
        )

    def _trained(self) -> list[tuple[str, torch.Tensor]]:
        """The parameters the optimizer holds, named (no optimizer: those that train)."""
        opt = self.optimizer() if self.optimizer is not None else None
        if opt is None:
            return [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        held = {id(p) for group in opt.param_groups for p in group["params"]}
        return [(n, p) for n, p in self.named_parameters() + self._extra_params(opt) if id(p) in held]

    def zeroing_check(self, g: Gate) -> None:
        if self.zero_param is None:
            g.not_applicable("gradients zeroed between updates", "no parameter held a gradient after an update")
            return
        bad = self.not_zeroed
        g.check(
            "gradients zeroed between updates",
            not bad,
            "every update's backward started from zeroed gradients"
            if not bad
            else f"the gradients were never zeroed between update {bad[0] - 1} and update {bad[0]}: each backward "
            "added to the last update's gradients, so every update applies the sum of all gradients so far "
            "(call optimizer.zero_grad() after each step; accumulation belongs inside one update)",
        )

    def trainable_check(self, g: Gate) -> None:
        """What trains, by layer: only the normalisation layers training is named (a freeze that took too much)."""
        live = [
            (k, m)
            for k, ref in self.roots.items()
            if (m := ref()) is not None and next(m.parameters(), None) is not None
        ]
        many = len(live) > 1  # a model and its loss module: the model's layers by their own names
        t = layers.trainable([(self.root_names[k] if many else "", m) for k, m in live])
        if t.trainable == t.tensors or not t.trainable:
            why = "every parameter trains" if t.trainable else "no parameter requires grad"
            g.not_applicable("what trains", f"{why} ({t.tensors} tensors): no freeze to read")
            return
        g.inputs["trainable_share"] = round(t.trainable_numel / t.numel, 6) if t.numel else None
        if t.only_norm():
            g.check("what trains", False, t.only_norm_words(), warn=True)
        else:
            g.check("what trains", True, t.words())

    def held_by_an_optimizer(self, named: Sequence[tuple[str, torch.Tensor]]) -> list[str]:
        """The parameters that hold a gradient and that no optimizer the script built holds."""
        held = {id(p) for o in list(self.optimizers) for group in o.param_groups for p in group["params"]}
        return [n for n, p in named if p.grad is not None and id(p) not in held]

    def _extra_params(self, opt: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
        known = {id(p) for _, p in self.named_parameters()}
        out = []
        for gi, group in enumerate(opt.param_groups):
            for pi, p in enumerate(group["params"]):
                if id(p) not in known:
                    out.append((f"param_groups[{gi}][{pi}]", p))
        return out

    def _end_update_first(self, opt: torch.optim.Optimizer, st: Step) -> None:
        o = self.end()
        g = o.gate
        held = {id(p) for group in opt.param_groups for p in group["params"]}
        named = self.named_parameters() + self._extra_params(opt)
        after = fingerprint(named)
        # what the step is meant to move: the held tensors that require grad (a frozen one the optimizer holds gets
        # no gradient and is skipped by it, as a script that hands model.parameters() over and freezes some expects)
        optimized = [n for n, p in named if id(p) in held and p.requires_grad]
        held_frozen = [n for n, p in named if id(p) in held and not p.requires_grad]
        changed = [n for n in optimized if n in self.before and after[n] != self.before[n]]
        unchanged = [n for n in optimized if n not in changed]
        frozen = [n for n, p in named if not p.requires_grad]
        frozen_changed = [n for n in frozen if n in self.before and after[n] != self.before[n]]
        orphans = self.held_by_an_optimizer(named)
        idle = [n for n, p in self.named_parameters() if p.requires_grad and id(p) not in held and n not in orphans]
        g.inputs.update(
            {
                "optimizer": type(opt).__name__,
                "param_groups": len(opt.param_groups),
                "lr": st.lr,
                "microbatches": st.microbatches,
            }
        )
        zero_lr = not changed and all(float(gr.get("lr") or 0.0) == 0.0 for gr in opt.param_groups)
        also = f" (it also holds {len(held_frozen)} frozen, which the step skips)" if held_frozen else ""
        if not optimized:
            g.fail(
                "targeted parameters changed",
                f"the optimizer holds {len(held_frozen)} tensors and every one is frozen (requires_grad=False): "
                f"its step can change nothing ({short_list(held_frozen)}); hand it the parameters that should "
                "learn, or unfreeze these",
            )
        elif zero_lr:
            # a warm-up from zero (Hugging Face's default): the first step can change nothing
            g.check(
                "targeted parameters changed",
                False,
                "the learning rate is 0 at the first step (a warm-up from 0), so nothing could change: "
                "the later steps are checked instead",
                warn=True,
            )
            self.recheck = {}
        else:
            still = classify(named, unchanged)
            unexplained = [n for n in unchanged if n not in still.cancelled]  # cancelled: the loss ignores them
            g.check(
                "targeted parameters changed",
                bool(changed) and not unexplained,
                f"{len(changed)}/{len(optimized)} trainable tensors the optimizer holds changed{also}"
                + (
                    f"; unchanged: {short_list(unexplained)} (no gradient reached them, or too small a one to move them)"
                    if unexplained
                    else ""
                )
                + (f"; {still.cancelled_words()}" if still.cancelled else ""),
                warn=bool(changed),  # some unchanged: a warning; none changed: the step did nothing
            )
        g.check(
            "frozen parameters unchanged",
            not frozen_changed,
            f"{len(frozen)} frozen, unchanged" if not frozen_changed else f"changed: {short_list(frozen_changed)}",
        )
        g.check(
            "optimizer holds every parameter with a gradient",
            not orphans,
            f"{len(held)} tensors in {len(opt.param_groups)} groups ({type(opt).__name__})"
            + (f"; {short_list(idle)} require grad, got no gradient and are in no optimizer" if idle else "")
            if not orphans
            else f"{len(orphans)} parameters receive gradients but no optimizer holds them: {short_list(orphans)}; "
            "they never change (add them to the optimizer, or freeze them with requires_grad_(False))",
        )
        self.trainable_check(g)
        self.ranks_check(g, st)
        stateless = isinstance(opt, torch.optim.SGD) and not any(gr.get("momentum") for gr in opt.param_groups)
        g.check(
            "optimizer state allocated",
            bool(opt.state) or stateless,
            f"state for {len(opt.state)} parameter tensors" + (" (plain SGD keeps none)" if stateless else ""),
        )
        if st.loss is not None:
            g.check("finite loss", math.isfinite(st.loss), f"loss {st.loss:.4f}")
        self.before = {}
        self.record(o, duration=o.measure.duration_s)

    def _after_step(self, st: Step) -> None:
        """After a step's event: the later-steps window opens, is timed, and closes after the watched steps."""
        if ph.UPDATE_SECOND in self.done or self.cfg.steps < 2:
            return
        o = self.open
        if o is not None and o.name == ph.UPDATE_SECOND:
            if st.loss is not None and not math.isfinite(st.loss) or self.step >= self.cfg.steps:
                self._end_second()
            return
        if o is None and self.step >= 1 and self.step < self.cfg.steps:
            self.timed = []
            if self.recheck is not None:
                self.recheck = fingerprint(self._trained())
            self.begin(ph.UPDATE_SECOND, {"from_step": self.step + 1})

    def _interrupt_second(self) -> None:
        """An evaluation or a save inside the later steps' window: what was timed is kept, else it reopens later."""
        if self.timed:
            self._end_second(cut=True)
        else:
            self.abandon()

    def _end_second(self, cut: bool = False) -> None:
        o = self.end()
        g = o.gate
        times = list(self.timed)
        ordered = sorted(times)
        k = len(ordered)
        median = ordered[k // 2] if k % 2 else (ordered[k // 2 - 1] + ordered[k // 2]) / 2
        later = self.steps[-k:]
        g.inputs.update({"timed_updates": k, "steps": f"{later[0].number}-{later[-1].number}"})
        mbs = {s.microbatches for s in later}
        if len(mbs) == 1:
            g.inputs["microbatches"] = mbs.pop()
        losses = [s.loss for s in later if s.loss is not None]
        bad = [s.number for s in later if s.loss is not None and not math.isfinite(s.loss)]
        g.check(
            "finite loss",
            not bad,
            (f"loss {losses[-1]:.4f}" if losses else "no loss read") if not bad else f"non-finite at step {bad[0]}",
        )
        if self.recheck:
            after = fingerprint(self._trained())
            moved = [n for n, v in after.items() if self.recheck.get(n) != v]
            lrs = [s.lr for s in later if s.lr is not None]
            g.check(
                "targeted parameters changed",
                bool(moved) or not any(lrs),
                f"{len(moved)}/{len(after)} tensors the optimizer holds changed over steps "
                f"{later[0].number}-{later[-1].number} (lr up to {max(lrs, default=0.0):.3g})",
            )
            self.recheck = None
        self.zeroing_check(g)
        orphans = self.held_by_an_optimizer(self.named_parameters()) if self.optimizer is not None else []
        if orphans:  # a second optimizer's model (a GAN's generator) has its gradients by now
            g.fail(
                "optimizer holds every parameter with a gradient",
                f"{len(orphans)} parameters receive gradients but no optimizer holds them: {short_list(orphans)}; "
                "they never change (add them to an optimizer, or freeze them with requires_grad_(False))",
            )
        if cut:
            g.check(
                "steps timed",
                True,
                f"{k} of {self.cfg.steps - 1}: an evaluation or a save came at step {self.step}",
            )
        g.extra["step_time"] = {
            "median": median,
            "min": ordered[0],
            "max": ordered[-1],
            "n": k,
            "samples": [round(t, 6) for t in times],
        }
        self.record(o)
