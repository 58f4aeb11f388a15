"""One trace: the pilot's training step at full size on fake tensors, phase by phase, with GPU semantics on top.

The step is the pilot's own (:class:`cockpit.pilot.trainer.Trainer`: ``build``, ``update``, ``evaluate``,
``state_dict``); only its autocast context is replaced, by CUDA's policy (:mod:`.gpu`), because CPU autocast
applies CPU's. The phases are the pilot's memory phases:

``forward``       building the model and the first microbatch's forward pass
``backward``      that microbatch's backward pass
``update_first``  the update's other microbatches and the first optimizer step (optimizer state allocated)
``update_second`` a full update with the optimizer state resident
``worst_case``    a full update on the longest training batch
``validation``    the longest validation batch, in eval mode under no_grad
``save``          the checkpoint's state dict (torch.save copies to the host one tensor at a time)

An update runs at most :data:`MAX_MICROBATCHES` microbatches: from the second on, gradients are already
allocated and every further one repeats its memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import torch
from torch.overrides import TorchFunctionMode

from ..contract import Example, Params
from ..pilot.phases.worst_case import worst_batch
from ..pilot.task import Task
from ..pilot.trainer import Trainer
from ..pilot.usercode import user_int
from . import cpu, gpu
from . import strategy as strategy_
from .allocator import CachingAllocator, expandable_segments
from .counter import Counter, Fallback
from .strategy import Strategy

MAX_MICROBATCHES = 2
PHASES = ("forward", "backward", "update_first", "update_second", "worst_case", "validation", "save")


@dataclass
class PhaseMemory:
    name: str
    inputs: str
    peak_allocated: int  # bytes, as torch.cuda.max_memory_allocated() would say over the phase
    reserved: int  # bytes, the caching allocator model's reserved at the phase's end (it only grows)
    resident: int  # bytes allocated when the phase ends
    peak_bytes: int = 0  # the peak of the live storages' own sizes, unrounded (what the CPU check compares)


@dataclass
class Trace:
    microbatch: int
    gpu: bool
    fake: bool
    phases: list[PhaseMemory]
    parameters: int
    trainable: int
    seconds: float
    kernels: dict[str, int] = field(default_factory=dict)
    autocast_calls: int = 0
    invented: dict[str, int] = field(default_factory=dict)
    fallbacks: list[Fallback] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    optimizer: str = ""
    expandable: bool = False  # reserved modelled with expandable segments

    def phase(self, name: str) -> PhaseMemory:
        return next(p for p in self.phases if p.name == name)

    @property
    def peak(self) -> PhaseMemory:
        return max(self.phases, key=lambda p: p.peak_allocated)


class _Trainer(Trainer):
    """The pilot's trainer; under GPU semantics its autocast region is CUDA's policy, not the CPU's, and the batch
    and the model are made on the host and copied to the device as ``.to("cuda")`` copies them (the trace's CPU is
    both, and ``.to("cpu")`` copies nothing)."""

    semantics: gpu.CudaSemantics | None = None
    counter: Counter | None = None
    strategy: Strategy = Strategy()
    buckets: Any = ()  # DDP's gradient buckets, held for the run (a traced rank's; a real one's are DDP's)
    mesh: Any = None  # FSDP's device mesh (:func:`.strategy.process_group`)
    units = 0  # FSDP's sharded units

    def collate(self, examples: list[Example]) -> Any:
        """The task's collate runs for real on the host, as in training (its values are real: a collate that pads
        to a length it reads from a tensor gets that length); :meth:`to_device` puts its tensors on the device."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        counter = self.counter
        if counter is None:
            return super().collate(examples)
        if counter.fake_mode is None:  # a real run: the host is the CPU the device is (or, GPU semantics, beside it)
            if self.semantics is None:
                return super().collate(examples)
            with counter.host():
                return super().collate(examples)
        with counter.host(), unset_fake_temporarily():
            return super().collate(examples)

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        """The batch's tensor as the device holds it: copied as ``.to("cuda")`` copies it under GPU semantics; under
        the CPU's, the collate's own tensor (``.to("cpu")`` copies nothing), its whole storage counted."""
        from torch._subclasses.fake_tensor import FakeTensor

        counter = self.counter
        if counter is None:
            return super().to_device(t)
        with counter.device():
            fm = counter.fake_mode
            if fm is not None and not isinstance(t, FakeTensor):
                with fm:
                    if self.semantics is not None:
                        return gpu.device_copy(t)
                    held = fm.from_tensor(t)
                    counter.see(held)
                    return held
            if self.semantics is None:
                return super().to_device(t)
            return gpu.device_copy(t) if counter.on_host(t) else t

    def to_device_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """``Module.to("cuda")`` as the device holds its result: each parameter and buffer on the host copied as
        :func:`gpu.device_copy` copies it, a tied one once. Under the CPU's semantics ``.to("cpu")`` moves nothing.
        The parameters are replaced, never swapped: ``Module.to`` swaps a fake parameter with its copy, which torch
        refuses while a weak reference points at either (the fake mode keeps some: a deepcopy's source and copy)."""
        counter = self.counter
        if counter is None or counter.fake_mode is None:
            return super().to_device_model(model)
        if self.semantics is None or self.mesh is not None:
            return model  # under FSDP, fully_shard moves each parameter's shard to the device, never the whole
        moved: dict[int, Any] = {}
        with counter.device(), torch.no_grad():
            for module in model.modules():
                for where in (module._parameters, module._buffers):
                    for name, t in where.items():
                        if t is None or not counter.on_host(t):
                            continue
                        if id(t) not in moved:
                            copy = gpu.device_copy(t)
                            if isinstance(t, torch.nn.Parameter):
                                copy = torch.nn.Parameter(copy, requires_grad=t.requires_grad)
                            moved[id(t)] = copy
                        where[name] = moved[id(t)]
        return model

    def build(self, allow_frozen: bool = False) -> None:
        """The pilot's build; a traced DDP rank wraps nothing (no process group) and holds what DDP would
        allocate instead (:func:`.strategy.wrap`)."""
        counter, world = self.counter, self.world
        if (counter is not None and counter.fake_mode is not None) or self.mesh is not None:
            self.world = 1  # no DDP wrapper: a traced rank holds its buckets instead, an FSDP rank is sharded
        try:
            self._build(allow_frozen)
        finally:
            self.world = world
        if self.strategy.ddp and self.ddp is None and counter is not None:
            with counter.device():
                self.buckets = strategy_.wrap(self.model)

    def _build_optimizer(self) -> None:
        """FSDP shards the model before its optimizer is made (the optimizer then holds the shards)."""
        if self.mesh is not None:
            self.units = strategy_.shard(self.model, self.mesh)
        super()._build_optimizer()

    def _build(self, allow_frozen: bool) -> None:
        counter = self.counter
        if self.semantics is None or counter is None:
            return super().build(allow_frozen)
        task = self.task

        def build_model(p: Params) -> Any:
            with counter.host():  # built on the host; to_device_model moves it
                return task.build_model(p)

        self.task = dataclasses.replace(task, build_model=build_model)
        try:
            super().build(allow_frozen)
        finally:
            self.task = task

    def autocast(self) -> Any:
        if self.semantics is None:
            return super().autocast()
        if self.precision in ("bf16", "fp16"):
            return self.semantics.autocast(torch.bfloat16 if self.precision == "bf16" else torch.float16)
        return contextlib.nullcontext()


def describe(task: Task, params: Params, examples: list[Example]) -> str:
    text = f"{len(examples)} examples"
    if task.length is not None and examples:
        longest = max(user_int("length", task.length, e) for e in examples)
        limit = user_int("max_length", task.max_length, params, none=True) if task.max_length else None
        text += f", longest {min(longest, limit) if limit else longest}" + (
            f" (cropped from {longest})" if limit and longest > limit else ""
        )
    return text


class _Swappable(TorchFunctionMode):
    """Lets ``Module.to`` run on fake parameters: it swaps each parameter with its converted copy, which torch
    refuses while a weak reference points at either, and the fake mode's converter memo keeps one on every fake
    tensor it made, its constants' map one on every fake made from a Python number (``nn.Parameter(torch.tensor(
    2.66))``, CLIP's logit_scale). The memo is a cache, and the map only lets a write forget a constant's value,
    which the trace never reads (values read are invented): both are emptied after each ``to`` and ``detach``."""

    def __init__(self, fake_mode: Any):
        super().__init__()
        self.converter = fake_mode.fake_tensor_converter

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.Tensor.__deepcopy__ and len(args) == 2:
            return _deepcopy(args[0], args[1])
        out = func(*args, **(kwargs or {}))
        if func is torch.Tensor.to or func is torch.Tensor.detach:
            self.converter.tensor_memo.clear()
            self.converter.constant_storage_mapping.clear()
        return out


def _deepcopy(t: torch.Tensor, memo: dict[int, Any]) -> torch.Tensor:
    """``copy.deepcopy`` of a fake tensor as a copy of its own (a DPO reference model deep-copied from the policy):
    the fake mode's own deepcopy converts the tensor again through its memo, and the copies it made left the
    process to crash later in a storage's deallocation (torch 2.13)."""
    if id(t) in memo:
        return memo[id(t)]
    with torch.no_grad():
        new = t.detach().clone()
    if isinstance(t, torch.nn.Parameter):
        new = torch.nn.Parameter(new, requires_grad=t.requires_grad)
    else:
        new.requires_grad_(t.requires_grad)
    memo[id(t)] = new
    return new


class _Splitter:
    """Ends the ``forward`` stretch when the first backward starts and ``backward`` when it is over."""

    def __init__(self, counter: Counter):
        self.counter = counter

    def __call__(self) -> None:
        c = self.counter
        name = c.current.name if c.current is not None else ""
        in_backward = torch._C._current_graph_task_id() != -1
        if name == "forward" and in_backward:
            c.end()
            c.begin("backward")
        elif name == "backward" and not in_backward:
            c.end()
            c.begin("update_first")


@contextlib.contextmanager
def _quiet(name: str) -> Any:
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _real(fn: Any) -> Any:
    """The data order draws its permutation with torch: outside the fake mode, so the indices are real."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return fn()


def run(
    task: Task,
    params: Params,
    *,
    seed: int = 0,
    microbatch: int | None = None,
    gpu_semantics: bool = True,
    fake: bool = True,
    trainable_only: bool = False,
    mark: bool = False,
    strategy: Strategy | None = None,
    rank: int = 0,
) -> Trace:
    """Trace the pilot's memory phases. ``fake=False`` runs the same on real CPU tensors (what the tests compare).
    ``strategy``: one rank of it (``rank``, its share of the data); a real DDP run needs its process group."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    params = dict(params)
    if microbatch is not None:
        params["microbatch"] = microbatch
    params["device"] = "cpu"
    t0 = time.perf_counter()
    strategy = strategy or Strategy()
    world = strategy.ranks
    tr = _Trainer(task, params, seed, device=torch.device("cpu"), rank=rank if world > 1 else 0, world=world)
    tr.strategy = strategy
    tr.load_data()  # real data, outside the fake mode: the collate makes each batch from it as in training
    sem = gpu.CudaSemantics() if gpu_semantics else None
    tr.semantics = sem
    fm = FakeTensorMode(allow_non_fake_inputs=True) if fake else None
    expandable = expandable_segments()  # the process's allocator configuration, as the pilot's run would read it
    counter = Counter(
        invent_scalars=fake,
        fake_mode=fm,
        mark=mark,
        workspace=None if sem else cpu.workspace,
        allocator=CachingAllocator(expandable=expandable),
    )
    counter.on_op = _Splitter(counter)
    tr.counter = counter
    phases: list[PhaseMemory] = []
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        tr.mesh = stack.enter_context(strategy_.process_group(strategy, rank))  # made before the fake mode
        if fm is not None:
            # a meta kernel that refuses logs its traceback before raising; the counter runs the op on the CPU
            # instead and the estimate names it, so the log is noise on the user's terminal
            stack.enter_context(_quiet("torch._subclasses.fake_tensor"))
            stack.enter_context(fm)
            stack.enter_context(_Swappable(fm))
        stack.enter_context(counter)
        if sem is not None:
            stack.enter_context(sem)
        first = _real(tr.next_microbatches)[:MAX_MICROBATCHES]
        counter.begin("forward")
        tr.build()
        if sem is not None:
            notes += gpu.optimizer_defaults(tr.optimizer)
        if strategy.ddp or strategy.fsdp:
            notes.append(strategy.note(tr.units))
        tr.update(first)  # the splitter cuts it into forward, backward and update_first
        counter.end()
        inputs = {name: describe(task, params, first[0]) for name in ("forward", "backward", "update_first")}
        with counter.segment("update_second"):
            second = _real(tr.next_microbatches)[:MAX_MICROBATCHES]
            inputs["update_second"] = describe(task, params, second[0])
            tr.update(second)
        with counter.segment("worst_case"):
            worst = worst_batch(cast(Any, SimpleNamespace(trainer=tr)))
            inputs["worst_case"] = describe(task, params, worst)
            tr.update([worst] * min(tr.accumulation, MAX_MICROBATCHES))
        if "val" in tr.splits and len(tr.splits["val"]):
            with counter.segment("validation"):
                val = list(tr.splits["val"])
                if task.length is not None:
                    val.sort(key=lambda e: task.length(e), reverse=True)  # type: ignore[misc]
                inputs["validation"] = describe(task, params, val[: tr.eval_microbatch])
                tr.evaluate("val", val[: tr.eval_microbatch])
        with counter.segment("save"):
            state = tr.state_dict(trainable_only)
            inputs["save"] = f"step {tr.step}"
            del state
        counter.on_op = None
    for seg in counter.segments:
        phases.append(
            PhaseMemory(
                seg.name,
                inputs.get(seg.name, ""),
                seg.peak_allocated,
                seg.peak_reserved,
                seg.end_allocated,
                seg.peak_bytes,
            )
        )
    n_params = sum(p.numel() for p in tr.model.parameters())
    n_train = sum(p.numel() for p in tr.model.parameters() if p.requires_grad)
    return Trace(
        microbatch=int(params["microbatch"]),
        gpu=gpu_semantics,
        fake=fake,
        phases=phases,
        parameters=n_params,
        trainable=n_train,
        seconds=time.perf_counter() - t0,
        kernels=dict(sem.kernels) if sem is not None else {},
        autocast_calls=sem.autocast_calls if sem is not None else 0,
        invented=dict(counter.invented),
        fallbacks=list(counter.fallbacks.values()),
        notes=notes,
        optimizer=tr.optimizer_source,
        expandable=expandable,
    )
