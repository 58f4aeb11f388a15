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
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import events as ev
from ..machine import CpuWatch, busy_words, gpu_others
from ..pilot.gate import Gate
from ..pilot.meter import Meter, PhaseMeasure, stack_info
from . import phases as ph

HWM = re.compile(rb"VmHWM:\s+(\d+)\s+kB")
CHUNK = 1 << 24  # elements summed at once when fingerprinting a parameter (bounds the float64 copy)


class ProbeStop(SystemExit):
    """Raised inside the script to end it once the probe has seen what it came for (exit status 0)."""

    def __init__(self, reason: str):
        super().__init__(0)
        self.reason = reason


@dataclass
class Config:
    mode: str = "probe"  # "probe": measure the phases; "resume": the resumed process, compared by the run
    steps: int = 5
    to_end: bool = False
    save_within: int = 1000
    compare_steps: int = 3
    resume: bool = False
    runner: int = 0

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Config:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass
class Open:
    """A phase being measured."""

    name: str
    gate: Gate
    cm: Any  # the meter's measure() context, entered
    measure: PhaseMeasure
    cpu: CpuWatch
    t0: float
    hwm: bool  # the kernel's peak-RSS counter was reset at the start: VmHWM is this phase's peak


@dataclass
class Step:
    number: int
    lr: float | None
    loss: float | None
    duration_s: float | None
    opt_step: float | None  # the optimizer's own step count after it (Adam's state), when it keeps one
    microbatches: int


@dataclass
class Evaluation:
    forwards: int = 0
    train_mode: int = 0  # forwards with the module in training mode
    with_grad: int = 0  # forwards with grad enabled
    losses: list[Any] = field(default_factory=list)  # loss tensors the model returned
    microbatch: int | None = None
    measured: bool = False


def _opt_step(opt: torch.optim.Optimizer) -> float | None:
    for state in opt.state.values():
        s = state.get("step") if isinstance(state, dict) else None
        if s is not None:
            try:
                return float(s)
            except (TypeError, ValueError, RuntimeError):
                return None
    return None


def _first_tensor(args: Any, kwargs: dict[str, Any] | None) -> torch.Tensor | None:
    for a in list(args or ()) + list((kwargs or {}).values()):
        if isinstance(a, torch.Tensor):
            return a
        if isinstance(a, dict):
            for v in a.values():
                if isinstance(v, torch.Tensor):
                    return v
    return None


def _shapes(args: Any, kwargs: dict[str, Any] | None) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, a in enumerate(args or ()):
        if isinstance(a, torch.Tensor):
            out[f"arg{i}"] = list(a.shape)
        elif isinstance(a, dict):
            out.update({str(k): list(v.shape) for k, v in a.items() if isinstance(v, torch.Tensor)})
    out.update({str(k): list(v.shape) for k, v in (kwargs or {}).items() if isinstance(v, torch.Tensor)})
    return dict(list(out.items())[:8])


def _loss_of(output: Any) -> torch.Tensor | None:
    """The loss a model returned with its output (Hugging Face: ``.loss`` or ``["loss"]``), if any."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    return loss if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


def fingerprint(params: Sequence[tuple[str, torch.Tensor]]) -> dict[str, tuple[float, float]]:
    """Sum and sum of absolute values of each parameter in float64: any update of any element moves them."""
    out = {}
    with torch.no_grad():
        for name, p in params:
            flat = p.detach().reshape(-1)
            s = a = 0.0
            for i in range(0, flat.numel(), CHUNK):
                part = flat[i : i + CHUNK].double()
                s += float(part.sum())
                a += float(part.abs().sum())
            out[name] = (s, a)
    return out


def _names(names: list[str], k: int = 4) -> str:
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def user_frame(exc: BaseException) -> str:
    """The innermost frame of the script's own code ('file:line in function'): not torch, not a library."""
    tb = traceback.extract_tb(exc.__traceback__)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    mine = [
        f
        for f in tb
        if not f.filename.startswith(here)
        and "site-packages" not in f.filename
        and "dist-packages" not in f.filename
        and not f.filename.startswith("<")
    ]
    f = (mine or list(tb))[-1] if (mine or tb) else None
    return f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" if f else "no frame"


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


class Observer:
    """The probe's state inside the script: which phase is open, what was seen, what is sent."""

    def __init__(self, cfg: Config, send: Callable[..., None], inject: str = ""):
        self.cfg = cfg
        self.send = send
        self.inject = dict(part.split(":", 1)[::-1] for part in inject.split(",") if ":" in part)  # phase -> kind
        self.meter = Meter(None)
        self.meter.take_baseline()
        self.t_start = time.perf_counter()
        self.open: Open | None = None
        self.done: set[str] = set()
        self.device: torch.device | None = None
        self.roots: dict[int, weakref.ref[torch.nn.Module]] = {}
        self.root_names: dict[int, str] = {}
        self.optimizer: weakref.ref[torch.optim.Optimizer] | None = None
        self.in_step = False
        self.in_backward = False
        self.in_save = False
        self.evaluation: Evaluation | None = None
        self.step = 0
        self.microbatches = 0
        self.losses: list[torch.Tensor] = []
        self.lr: float | None = None
        self.step_t0 = time.perf_counter()
        self.steps: list[Step] = []
        self.timed: list[float] = []  # update_second: each later step's duration
        self.second_pending = False
        self.before: dict[str, tuple[float, float]] = {}
        self.forward_inputs: dict[str, Any] = {}
        self.saves: list[dict[str, Any]] = []
        self.burst: dict[str, Any] | None = None  # the save phase's files so far
        self.loaded: list[str] = []
        self.stop_reason = ""
        self.finished = False
        self.diverged: dict[str, Any] | None = None
        self.recheck: dict[str, tuple[float, float]] | None = None  # fingerprint before the later steps

    # ------------------------------------------------------------------ sending

    def emit(self, kind: str, **payload: Any) -> None:
        self.send("event", event={"kind": kind, "t": time.time(), **payload})

    def log(self, message: str, level: str = "info") -> None:
        self.emit(ev.LOG, level=level, message=message)

    # ------------------------------------------------------------------ phases within the meter's bounds

    def begin(self, name: str, inputs: dict[str, Any] | None = None) -> None:
        assert self.open is None, f"{name} opened while {self.open.name} is open"
        g = Gate(name, dict(inputs or {}))
        self.emit(ev.PHASE_START, phase=name, inputs=g.inputs)
        hwm = _reset_hwm()
        cm = self.meter.measure(name)
        m = cm.__enter__()
        self.open = Open(name, g, cm, m, CpuWatch.start(), time.perf_counter(), hwm)
        kind = self.inject.get(name)
        if kind:
            self._injected(kind, name)

    def _injected(self, kind: str, name: str) -> None:
        """Test hook, as the pilot's: COCKPIT_INJECT="oom:backward" (or error:, die:) in that phase. The
        exception reaches the script as a real one would (through its own code and handlers)."""
        exc: BaseException | None = None
        if kind == "oom":
            exc = torch.OutOfMemoryError(f"CUDA out of memory (injected by COCKPIT_INJECT=oom:{name})")
        elif kind == "error":
            exc = RuntimeError(f"injected failure in the script (COCKPIT_INJECT=error:{name})")
        if exc is not None:
            exc._cockpit_injected = True  # type: ignore[attr-defined]
            raise exc
        if kind == "die":
            import signal

            os.kill(os.getpid(), signal.SIGKILL)

    def end(self) -> Open:
        """Close the open phase's bounds (counters read); the caller adds checks, then :meth:`record`."""
        o = self.open
        assert o is not None
        self.open = None
        o.cm.__exit__(None, None, None)
        if o.hwm:
            peak = _read_hwm()
            if peak is not None:
                o.measure.mem["rss_peak"] = max(int(o.measure.mem.get("rss_peak") or 0), peak)
        return o

    def record(self, o: Open, duration: float | None = None, **extra: Any) -> Gate:
        g = o.gate
        self.done.add(o.name)
        load = o.cpu.stop()
        extra["machine"] = load
        if load.get("busy"):
            extra["busy"] = busy_words(load)
        verdict = g.verdict
        if verdict == ev.Verdict.FAIL and not g.remedy:
            g.remedy = ph.REMEDY.get(o.name, "")
        if verdict == ev.Verdict.FAIL and not g.message:
            g.message = "; ".join(f"{c['name']}: {c['detail']}" for c in g.failures())
        self.emit(
            ev.GATE,
            phase=o.name,
            verdict=verdict.value,
            checks=g.checks,
            inputs=g.inputs,
            remedy=g.remedy if verdict in (ev.Verdict.FAIL, ev.Verdict.WARN) else "",
            message=g.message,
            duration_s=o.measure.duration_s if duration is None else duration,
            mem=o.measure.mem,
            **g.extra,
            **extra,
        )
        return g

    def skipped(self, name: str, why: str, inputs: dict[str, Any] | None = None) -> None:
        """A phase the script never went through while it was watched: a row that says so."""
        self.done.add(name)
        self.emit(
            ev.GATE,
            phase=name,
            verdict=ev.Verdict.SKIPPED.value,
            checks=[],
            inputs=dict(inputs or {}),
            remedy="",
            message=why,
            duration_s=None,
            mem=None,
        )

    def abandon(self) -> None:
        """Drop the open phase without a gate (a later-steps window that no step completed)."""
        if self.open is not None:
            o, self.open = self.open, None
            o.cm.__exit__(None, None, None)

    # ------------------------------------------------------------------ what the script does

    def root(self, module: torch.nn.Module) -> None:
        key = id(module)
        if key not in self.roots:
            self.roots[key] = weakref.ref(module)
            self.root_names[key] = type(module).__name__

    def named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        out: list[tuple[str, torch.nn.Parameter]] = []
        seen: set[int] = set()
        many = len(self.roots) > 1
        for key, ref in self.roots.items():
            m = ref()
            if m is None:
                continue
            for n, p in m.named_parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append((f"{self.root_names[key]}.{n}" if many else n, p))
        return out

    def forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        if self.in_backward or self.in_step or self.in_save:
            return  # activation checkpointing recomputes forwards inside backward; LBFGS inside its step
        grad = torch.is_grad_enabled()
        ev_ = self.evaluation
        if ev_ is not None and (not grad or not module.training):
            self._eval_forward(module, grad)
            return
        self._close_save()
        self.check_stop()
        if ev_ is not None:
            self._end_evaluation(module)
        elif not grad:
            self._start_evaluation()
            self._eval_forward(module, grad)
            return
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
        if self.in_backward or self.in_step or self.in_save:
            return
        ev_ = self.evaluation
        if ev_ is not None and ev_.measured:
            if ev_.microbatch is None:
                t = _first_tensor(args, kwargs)
                ev_.microbatch = int(t.shape[0]) if t is not None and t.dim() > 0 else None
            loss = _loss_of(output)
            if loss is not None:
                ev_.losses.append(loss.detach())
            return
        o = self.open
        if o is not None and o.name == ph.FORWARD and "shapes" not in o.gate.inputs:
            o.gate.inputs["shapes"] = _shapes(args, kwargs)
            t = _first_tensor(args, kwargs)
            if t is not None and t.dim() > 0:
                o.gate.inputs["microbatch"] = int(t.shape[0])

    def backward_begin(self, tensors: Any) -> bool:
        """Before ``torch.autograd.backward`` (the loss is the first tensor it is given); True when measured."""
        self._close_save()
        self.check_stop()
        if self.evaluation is not None:
            self._end_evaluation(None)
        loss = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        loss = loss if isinstance(loss, torch.Tensor) else None
        if loss is not None and loss.numel() == 1:
            self.losses.append(loss.detach())
        self.microbatches += 1
        if self.cfg.mode != "probe" or self.open is None or self.open.name != ph.FORWARD:
            return False
        self._end_forward(loss)
        self.check_stop()  # a non-finite first loss ends the script here
        self.begin(ph.BACKWARD, dict(self.forward_inputs))
        return True

    def backward_end(self) -> None:
        if self.open is not None and self.open.name == ph.BACKWARD:
            self._end_backward()

    def step_pre(self, opt: torch.optim.Optimizer) -> None:
        if self.in_step:
            return
        main = self.optimizer() if self.optimizer is not None else None
        if main is None:
            self.optimizer = weakref.ref(opt)
        elif main is not opt:
            return  # a second optimizer (a GAN's other half): the first one counts the steps
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
        if self.cfg.mode == "probe" and self.step == 0 and ph.UPDATE_FIRST not in self.done and self.open is None:
            self.before = fingerprint(self.named_parameters() + self._extra_params(opt))
            self.begin(ph.UPDATE_FIRST, {"microbatches": self.microbatches})

    def step_post(self, opt: torch.optim.Optimizer) -> None:
        main = self.optimizer() if self.optimizer is not None else None
        if main is not opt:
            return
        self.in_step = False
        t_end = time.perf_counter()
        self.step += 1
        watched = self.watching()
        loss = self._loss_value() if watched or self.step % 10 == 0 else None
        self.losses = []
        st = Step(
            self.step,
            self.lr,
            loss,
            t_end - self.step_t0,
            _opt_step(opt) if watched or self.cfg.mode == "resume" else None,
            self.microbatches,
        )
        self.microbatches = 0
        self.steps.append(st)
        phase = self.open.name if self.open is not None else ("resume" if self.cfg.mode == "resume" else "train")
        if self.cfg.mode == "probe" and self.open is not None and self.open.name == ph.UPDATE_FIRST:
            self._end_update_first(opt, st)
            phase = ph.UPDATE_FIRST
        elif self.open is not None and self.open.name == ph.UPDATE_SECOND:
            self.timed.append(st.duration_s or 0.0)
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

    # ------------------------------------------------------------------ saving and loading

    def save_begin(self, target: Any) -> dict[str, Any]:
        """Before ``torch.save`` or a safetensors save; what :meth:`save_end` needs."""
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
        return {"path": path, "target": target, "pos": _tell(target), "t0": time.perf_counter()}

    def save_end(self, token: dict[str, Any]) -> None:
        took = time.perf_counter() - token["t0"]
        path, pos = token["path"], token["pos"]
        if path:
            size = _size(path)
        else:
            now = _tell(token["target"])
            size = now - pos if pos is not None and now is not None else None
        entry = {"path": os.path.abspath(path) if path else None, "bytes": size, "seconds": took, "step": self.step}
        if self.burst is not None and self.open is not None and self.open.name == ph.SAVE:
            self.burst["files"].append(entry)
            self.burst["bytes"] += size or 0
            self.burst["seconds"] += took
            self.burst["calls"] += 1
            self.burst["end"] = time.perf_counter()
        self._saved(entry)

    def _saved(self, entry: dict[str, Any]) -> None:
        if entry["step"] < 1:
            return
        if not self.saves or self.saves[-1]["step"] != entry["step"]:
            self.saves.append({"step": entry["step"], "files": []})
        if entry["path"]:
            self.saves[-1]["files"].append(entry["path"])

    def load(self, target: Any) -> None:
        if isinstance(target, (str, os.PathLike)):
            self.loaded.append(os.path.abspath(os.fspath(target)))

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
        if self.evaluation is not None:
            self._end_evaluation(None)
        o = self.open
        if o is not None and exc is not None:
            g = self.end().gate
            if is_oom(exc):
                first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                g.fail("memory", f"out of memory: {first}")
                g.message = f"out of memory in {o.name} with inputs {_fmt(g.inputs)}"
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
        if self.cfg.mode != "probe" or exc is not None or self.diverged:
            return
        n = self.step
        if ph.FORWARD not in self.done:
            return  # the script never trained while watched: the run's end says so
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

    # ------------------------------------------------------------------ the phases' own work

    def _stack(self, module: torch.nn.Module, args: Any) -> None:
        """The stack gate, at the first training forward: the device is known from the model."""
        p = next(module.parameters(), None)
        t = p if p is not None else _first_tensor(args, None)
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
        peak = _read_hwm()
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
            ok = torch.stack([torch.isfinite(p.grad).all() for _, p in with_grad]).cpu()  # type: ignore[arg-type]
            bad = [n for (n, _), fine in zip(with_grad, ok.tolist(), strict=True) if not fine]
        g.check(
            "every trainable parameter has a gradient",
            not missing,
            f"{len(trainable) - len(missing)}/{len(trainable)}"
            + (f"; none for {_names(missing)} (detached from the loss, or unused)" if missing else ""),
            warn=True,  # a script may train parts in turn; the update's check says what moved
        )
        g.check(
            "finite gradients",
            not bad,
            "all finite" if not bad else f"non-finite in {_names(bad)} (an fp16 grad scaler skips such a step)",
            warn=True,
        )
        frozen_grad = [n for n, p in frozen if p.grad is not None]
        g.check(
            "frozen parameters get no gradient",
            not frozen_grad,
            f"{len(frozen)} frozen, none with a gradient"
            if not frozen_grad
            else f"{_names(frozen_grad)} have gradients",
        )
        self.record(o)
        # The rest of the first update (its other microbatches and the step) is measured as update_first;
        # the parameters are fingerprinted before its bounds so the copy's memory is not counted in it.
        if self.step == 0 and ph.UPDATE_FIRST not in self.done:
            self.before = fingerprint(self.named_parameters())
            self.begin(ph.UPDATE_FIRST, {"microbatches": self.microbatches})

    def _trained(self) -> list[tuple[str, torch.Tensor]]:
        """The parameters the optimizer holds, named."""
        opt = self.optimizer() if self.optimizer is not None else None
        if opt is None:
            return []
        held = {id(p) for group in opt.param_groups for p in group["params"]}
        return [(n, p) for n, p in self.named_parameters() + self._extra_params(opt) if id(p) in held]

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
        optimized = [n for n, p in named if id(p) in held]
        changed = [n for n in optimized if n in self.before and after[n] != self.before[n]]
        unchanged = [n for n in optimized if n not in changed]
        frozen = [n for n, p in named if not p.requires_grad]
        frozen_changed = [n for n in frozen if n in self.before and after[n] != self.before[n]]
        not_held = [n for n, p in self.named_parameters() if p.requires_grad and id(p) not in held]
        g.inputs.update(
            {
                "optimizer": type(opt).__name__,
                "param_groups": len(opt.param_groups),
                "lr": st.lr,
                "microbatches": st.microbatches,
            }
        )
        zero_lr = not changed and all(float(gr.get("lr") or 0.0) == 0.0 for gr in opt.param_groups)
        if zero_lr:
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
            g.check(
                "targeted parameters changed",
                bool(changed) and not unchanged,
                f"{len(changed)}/{len(optimized)} tensors the optimizer holds changed"
                + (f"; unchanged: {_names(unchanged)} (no gradient reached them)" if unchanged else ""),
                warn=bool(changed),  # some unchanged: a warning; none changed: the step did nothing
            )
        g.check(
            "frozen parameters unchanged",
            not frozen_changed,
            f"{len(frozen)} frozen, unchanged" if not frozen_changed else f"changed: {_names(frozen_changed)}",
        )
        g.check(
            "optimizer holds every trainable parameter",
            not not_held,
            f"{len(held)} tensors in {len(opt.param_groups)} groups ({type(opt).__name__})"
            if not not_held
            else f"{len(not_held)} parameters require grad but are in no parameter group: {_names(not_held)}; "
            "they get gradients and never change",
        )
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

    def _eval_forward(self, module: torch.nn.Module, grad: bool) -> None:
        e = self.evaluation
        assert e is not None
        if next(module.parameters(), None) is None:
            return  # a loss module (no parameters): its training flag changes nothing
        e.forwards += 1
        e.train_mode += int(module.training)
        e.with_grad += int(grad)

    def _end_evaluation(self, module: torch.nn.Module | None) -> None:
        """The evaluation ends where training goes on (``module``: the next training forward's root)."""
        e, self.evaluation = self.evaluation, None
        if e is None or not e.measured or self.open is None or self.open.name != ph.VALIDATION:
            return
        if e.forwards == 0:
            self.abandon()  # only parameter-free modules (a loss computed under no_grad): no evaluation
            return
        o = self.end()
        g = o.gate
        g.inputs.update({"forwards": e.forwards, "microbatch": e.microbatch})
        g.check(
            "eval mode",
            e.train_mode == 0,
            "the model was in eval mode"
            if e.train_mode == 0
            else f"{e.train_mode} of {e.forwards} forward passes ran in training mode (dropout, batch norm "
            "statistics): call model.eval() before evaluating",
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
        if module is not None:
            g.check(
                "training mode restored",
                module.training,
                "back in train mode" if module.training else "training went on in eval mode",
            )
        self.record(o)

    def _close_save(self) -> None:
        """The save phase ends where anything else begins: its gate covers every file of the checkpoint."""
        o = self.open
        if o is None or o.name != ph.SAVE or self.in_save:
            return
        b = self.burst or {"files": [], "bytes": 0, "seconds": 0.0, "calls": 0}
        self.burst = None
        o = self.end()
        g = o.gate
        files = b["files"]
        duration = (b.get("end", o.t0) - o.t0) if files else o.measure.duration_s
        g.inputs.update(
            {
                "files": [os.path.basename(f["path"]) if f["path"] else "(a file object)" for f in files][:8],
                "calls": b["calls"],
            }
        )
        empty = [f["path"] for f in files if f["path"] and not f["bytes"]]
        g.check(
            "written",
            bool(files) and not empty,
            f"{b['bytes'] / 2**20:.2f} MiB in {len(files)} file{'s' if len(files) != 1 else ''}, "
            f"{b['seconds']:.2f} s writing ({duration:.2f} s from the first write to the last)"
            if not empty
            else f"empty: {_names(empty)}",
        )
        g.extra["bytes"] = b["bytes"]
        g.extra["files"] = [f["path"] for f in files if f["path"]]
        self.record(o, duration=duration)


def _fmt(inputs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in inputs.items()) or "none"


def _tell(target: Any) -> int | None:
    try:
        return int(target.tell()) if hasattr(target, "tell") else None
    except (OSError, ValueError):
        return None


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _reset_hwm() -> bool:
    """Reset the kernel's peak-RSS counter (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _read_hwm() -> int | None:
    try:
        with open("/proc/self/status", "rb") as fh:
            m = HWM.search(fh.read())
        return int(m.group(1)) * 1024 if m else None
    except OSError:
        return None
