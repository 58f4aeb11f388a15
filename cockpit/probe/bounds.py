"""The observer's lowest layer: its state, and each phase opened and closed within the meter's bounds.

Every phase, whatever the script was doing, is measured the same way: :meth:`Bounds.begin` resets the
peak counters and enters the meter, :meth:`Bounds.end` reads them, :meth:`Bounds.record` sends the
gate. Keeping that in one place is what keeps every phase measured as the pilot measures its own. The
state the upper layers share (:mod:`.training`, :mod:`.saving`, :mod:`.evaluation`, :mod:`.observer`),
and the records it is kept in, are set up here too, so each layer can read what the others saw.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, cast

import torch

from .. import events as ev
from ..machine import CpuWatch, busy_words
from ..pilot.gate import Gate
from ..pilot.meter import Meter, PhaseMeasure
from ..pilot.unregistered import Stray
from . import phases as ph
from .channel import Diverged, Save
from .config import ChildConfig
from .modes import ModeReading
from .ranks import LocalGrads
from .reading import read_peak_rss, reset_peak_rss

if TYPE_CHECKING:  # typing.NotRequired and Unpack are Python 3.11; annotations here are never evaluated
    from typing import NotRequired, Unpack


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
    def of(cls, raw: Mapping[str, object]) -> Config:
        """From the JSON in the script's environment (a key it does not know is left out)."""
        names = set(cls.__dataclass_fields__)
        return cls(**cast(ChildConfig, {k: v for k, v in raw.items() if k in names}))  # ProbeConfig.child's


class SavedFile(TypedDict):
    """One file a save call wrote: its path (None: a file object with no name), size, seconds, the step it follows."""

    path: str | None
    bytes: int | None
    seconds: float
    step: int


class Burst(TypedDict):
    """The save phase's files so far: a checkpoint is often several calls."""

    files: list[SavedFile]
    bytes: int
    seconds: float
    calls: int
    end: NotRequired[float]  # when the last write ended


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
    load: ev.CpuLoad | None = None  # the machine's load over the phase, read at its end when recorded later


@dataclass
class FirstCall:
    """The first training forward, kept until its backward ends: the mode reading runs it again in eval mode."""

    module: weakref.ref[torch.nn.Module]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: list[torch.Tensor]  # its floating outputs, detached


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
    trailing: int = 0  # the last forwards in a row with grad enabled (a training forward, if a backward follows)
    trailing_eval: int = 0  # of those, in eval mode
    losses: list[torch.Tensor] = field(default_factory=list)  # loss tensors the model returned
    microbatch: int | None = None
    measured: bool = False
    module: weakref.ref[torch.nn.Module] | None = None  # the first evaluated module
    sampled: int = 0  # forwards that extend the previous one's tokens by one (generation), left out of the counts
    last: torch.Tensor | None = None  # the last forward's token ids (integer input), while a generation may go on
    last_counted: tuple[int, int] | None = None  # what the last forward added to (train_mode, with_grad), if counted


class Bounds:
    """The probe's state inside the script, and the bounds every phase is measured within."""

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
        self.before: dict[str, tuple[float, float, float]] = {}
        self.forward_inputs: dict[str, ev.JSON] = {}
        self.strays: list[Stray] | None = None  # what the first loss trains outside the models' parameters
        self.held_before: set[int] | None = None  # what the first model held before its first training forward
        self.saves: list[Save] = []
        self.burst: Burst | None = None  # the save phase's files so far
        self.loaded: list[str] = []
        self.stop_reason = ""
        self.finished = False
        self.diverged: Diverged | None = None
        self.recheck: dict[str, tuple[float, float, float]] | None = None  # fingerprint before the later steps
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # every one the script built
        self.backwards = 0  # backward() calls seen
        self.loader_sizes: set[int] = set()
        self.counts: dict[str, int] = {}  # what the script was seen doing, for the phases it never reached
        self.last_call = ""  # the batch_size of every DataLoader the script built
        self.pending = False  # a backward since the last update: an update is due
        self.versions: list[int] = []  # no optimizer: the trainable parameters' version counters after a backward
        self.sentinel: tuple[torch.Tensor, torch.Tensor] | None = None  # and one small parameter with its copy
        self.closure_calls = 0  # optimizer.step(closure): the closure's calls in this step (LBFGS re-evaluates)
        self.zero_param: torch.Tensor | None = None  # a held parameter whose gradient must be zeroed between updates
        self.zero_pending = False  # no backward has found it zeroed since the last update
        self.zero_backwards = 0
        self.not_zeroed: list[int] = []  # updates whose backward calls never found the gradients zeroed
        self.in_measure = False  # the probe runs the model itself (the mode reading): its hooks look away
        self.first_call: FirstCall | None = None  # the first training forward: module, args, kwargs, its outputs
        self.modes: dict[object, ModeReading] = {}  # what the mode changes, by root id and by class
        self.local: LocalGrads | None = None  # several ranks: this rank's own gradients at the first backward
        self.eval_modes: ModeReading | None = None  # what it changes for the model the measured evaluation ran
        self.held_validation: Open | None = (
            None  # the first evaluation, measured, waiting for the next training forward
        )

    # ------------------------------------------------------------------ sending

    def emit(self, kind: str, /, **payload: Unpack[ev.Event]) -> None:
        event: ev.Event = {"kind": kind, "t": time.time(), **payload}
        self.send("event", event=event)

    def log(self, message: str, level: str = "info") -> None:
        self.emit(ev.LOG, level=level, message=message)

    # ------------------------------------------------------------------ phases within the meter's bounds

    def begin(self, name: str, inputs: ev.JSONObject | None = None) -> None:
        assert self.open is None, f"{name} opened while {self.open.name} is open"
        g = Gate(name, dict(inputs or {}))
        self.emit(ev.PHASE_START, phase=name, inputs=g.inputs)
        hwm = reset_peak_rss()
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
            peak = read_peak_rss()
            if peak is not None:
                o.measure.mem["rss_peak"] = max(int(o.measure.mem.get("rss_peak") or 0), peak)
        return o

    def record(self, o: Open, duration: float | None = None) -> Gate:
        g = o.gate
        self.done.add(o.name)
        load = o.load if o.load is not None else o.cpu.stop()
        figures: ev.GateExtras = {**g.extra, "machine": load}  # the phase's own figures, then its load
        if load.get("busy"):
            figures["busy"] = busy_words(load)
        verdict = g.verdict
        if verdict == ev.Verdict.FAIL and not g.remedy:
            g.remedy = ph.REMEDY.get(o.name, "")
        if verdict == ev.Verdict.FAIL and not g.message:
            g.message = "; ".join(f"{c['name']}: {c['detail']}" for c in g.failures())
        if verdict == ev.Verdict.WARN and not g.message:  # a warning says what it warns of, as a failure does
            g.message = "; ".join(f"{c['name']}: {c['detail']}" for c in g.checks if not c["ok"])
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
            **figures,
        )
        return g

    def skipped(self, name: str, why: str, inputs: ev.JSONObject | None = None) -> None:
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

    def _count(self, what: str, call: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        self.last_call = call

    def root(self, module: torch.nn.Module) -> None:
        key = id(module)
        if key not in self.roots:
            self.roots[key] = weakref.ref(module)
            name = type(module).__name__
            k = sum(1 for n in self.root_names.values() if n.split("#")[0] == name)
            self.root_names[key] = f"{name}#{k + 1}" if k else name  # a GAN's two Sequentials: told apart

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
