"""Counts live tensor storages by size below autograd, as the GPU's allocator would see them.

One :class:`Counter` is a ``TorchDispatchMode``: every tensor an operation returns is looked at; a storage
not seen before is an allocation (fed to the :class:`~.allocator.CachingAllocator` model), and a weak reference
frees it when the last tensor using it dies, as the caching allocator frees a block when its storage is released.
It works the same on fake tensors (the estimate) and on real CPU tensors (what the tests compare it with).

Under fake tensors two things cannot be computed and are handled here, never silently:

* a value read from a tensor (``float(loss)``, ``.item()``): the counter answers 1 (True for a boolean; 0.0 for the
  fp16 grad scaler's found_inf, so the step happens) and records where it was read;
* an operation fake tensors cannot run (a custom op without a fake kernel, an output whose shape depends on the
  data): it runs for real on the CPU at full size, on inputs made of ones (booleans), zeros (integers) or normal
  noise (floating point), and its outputs are counted as measured there; each such op is recorded.
"""

from __future__ import annotations

import functools
import traceback
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten, tree_map_only

from .allocator import CachingAllocator, rounded

SCALAR = torch.ops.aten._local_scalar_dense.default
ANY = frozenset({torch.ops.aten.any.default, torch.ops.aten.any.dim, torch.ops.aten.any.dims})
MAX_READS = 2000  # values read at one line before the trace calls it a loop on the data (it would never end)
PIN = torch.ops.aten._pin_memory.default  # fake tensors have no kernel for it; pinned memory is the host's
MARK = "cockpit-estimate:"  # the profiler ranges that mark a phase's start and end
GRAD_SCALER = "amp/grad_scaler.py"  # where torch's GradScaler reads found_inf


@dataclass
class Fallback:
    """An operation that ran for real on the CPU because fake tensors could not run it."""

    op: str
    why: str
    calls: int = 0
    output_bytes: int = 0


class Unfakeable(Exception):
    """An operation fake tensors cannot run and the CPU cannot run either (a CUDA-only kernel, say)."""

    def __init__(self, op: str, fake_error: BaseException, cpu_error: BaseException):
        self.op = op
        super().__init__(
            f"{op} cannot run on fake tensors ({type(fake_error).__name__}: {str(fake_error).splitlines()[0][:200]}) "
            f"nor on the CPU ({type(cpu_error).__name__}: {str(cpu_error).splitlines()[0][:200]})"
        )


class DataDependent(Exception):
    """The task's code read a value from a tensor at one line so often that it loops on the data (a rejection
    sampler, a while loop on a tensor's value): fake tensors have no values, so the loop would never end."""

    def __init__(self, where: str, reads: int):
        self.where = where
        super().__init__(
            f"a loop on the data at {where}: {reads:,} values read there from tensors, which have none under fake "
            "tensors, so the loop never ends (data-dependent control flow)"
        )


@dataclass
class Segment:
    """The peak and the live bytes at the end of one stretch of the trace (a phase, or a part of one)."""

    name: str
    start_allocated: int = 0
    peak_allocated: int = 0
    end_allocated: int = 0
    peak_reserved: int = 0
    peak_bytes: int = 0  # the peak of the storages' own sizes, unrounded (what a CPU allocator is asked for)


@dataclass(eq=False)
class Counter(TorchDispatchMode):
    invent_scalars: bool = False
    fake_mode: Any = None  # the FakeTensorMode the trace runs under, for the CPU fallback
    allocator: CachingAllocator = field(default_factory=CachingAllocator)
    segments: list[Segment] = field(default_factory=list)
    invented: dict[str, int] = field(default_factory=dict)  # where a value was read -> how often
    fallbacks: dict[str, Fallback] = field(default_factory=dict)
    _refs: dict[int, Any] = field(default_factory=dict)
    _host: dict[int, Any] = field(default_factory=dict)  # storages made on the host (not the device's): weak refs
    _host_depth: int = 0
    # the last outputs of any(), read as False: held, not weakly referenced (a weak reference on a tensor blocks
    # swap_tensors), and few (each is a 512 B block live a little longer than in the task)
    _any: deque[Any] = field(default_factory=lambda: deque(maxlen=4))
    _sizes: dict[int, int] = field(default_factory=dict)  # token -> the storage's own bytes
    _tokens: dict[int, int] = field(default_factory=dict)  # a live storage's id -> its block's token
    live_bytes: int = 0  # live storages' own bytes, unrounded
    mark: bool = False  # put each phase's start and end in torch's profiler (what :mod:`.measure` reads)
    workspace: Any = None  # (func, args, kwargs, out) -> bytes a kernel holds inside beyond its outputs (:mod:`.cpu`)
    _next: int = 0
    current: Segment | None = None
    on_op: Any = None  # called before every operation (the trace uses it to cut phases at backward's edges)

    def __post_init__(self) -> None:
        TorchDispatchMode.__init__(self)

    def __enter__(self) -> Counter:
        # A storage resized in place (FSDP frees an unsharded parameter's memory with resize_(0) and gathers into
        # it again with resize_(n)) is not an operation the dispatcher sees: the resize is followed here, as torch's
        # own MemTracker follows it, while the counter is active.
        self._resize = torch.UntypedStorage.resize_
        original, counter = self._resize, self

        @functools.wraps(original)
        def resize_(st: Any, size: int) -> Any:
            out = original(st, size)
            counter.resized(st)
            return out

        super().__enter__()
        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign, assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]

    # ---- phases

    def begin(self, name: str) -> Segment:
        """Start a new stretch: its peak starts at what is live now (the pilot resets its peak counters so)."""
        a = self.allocator
        seg = Segment(name, a.allocated, a.allocated, a.allocated, a.reserved, self.live_bytes)
        self._mark("begin", name)
        self.segments.append(seg)
        self.current = seg
        return seg

    def end(self) -> None:
        if self.current is not None:
            self.current.end_allocated = self.allocator.allocated
            self.current.peak_reserved = self.allocator.reserved
            self._mark("end", self.current.name)
        self.current = None

    def _mark(self, what: str, name: str) -> None:
        if self.mark:
            with torch.profiler.record_function(f"{MARK}{what}:{name}"):
                pass

    @contextmanager
    def segment(self, name: str) -> Iterator[Segment]:
        seg = self.begin(name)
        try:
            yield seg
        finally:
            if self.current is seg:
                self.end()

    @property
    def live(self) -> int:
        return self.allocator.allocated

    # ---- the host and the device

    @contextmanager
    def host(self) -> Iterator[None]:
        """What runs here runs on the host (the task's collate, the model's construction before ``.to(device)``):
        the storages it makes are not the device's and are never counted, nor later when an op returns them."""
        self._host_depth += 1
        try:
            yield
        finally:
            self._host_depth -= 1

    @contextmanager
    def device(self) -> Iterator[None]:
        """Inside :meth:`host`, a stretch that runs on the device again (the copy of a batch to it)."""
        depth, self._host_depth = self._host_depth, 0
        try:
            yield
        finally:
            self._host_depth = depth

    def on_host(self, t: torch.Tensor) -> bool:
        """Whether a tensor's storage is the host's: made in :meth:`host`, or before the trace (the task's data)."""
        if t.layout != torch.strided:
            return False
        if self.fake_mode is not None and not isinstance(t, FakeTensor):
            return True
        return id(t.untyped_storage()) in self._host

    def _mark_host(self, st: Any) -> None:
        key = id(st)
        if key not in self._host and key not in self._refs:
            self._host[key] = weakref.ref(st, functools.partial(self._host_freed, key))

    def _host_freed(self, key: int, _ref: Any = None) -> None:
        self._host.pop(key, None)

    # ---- tracking

    def see(self, tree: Any) -> None:
        """Count the storages an operation returned (tensors made before the trace, the task's data on the host,
        are not the device's; under fake tensors only fake ones count)."""
        flat, _ = tree_flatten(tree)
        for t in flat:
            if is_traceable_wrapper_subclass(t):  # a DTensor (FSDP's shards): the storages are its inner tensors'
                self.see([getattr(t, name) for name in t.__tensor_flatten__()[0]])
                continue
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                if self.fake_mode is not None and not isinstance(t, FakeTensor):
                    continue
                if self._host_depth:
                    self._mark_host(t.untyped_storage())
                else:
                    self._storage(t.untyped_storage())

    def _storage(self, st: Any) -> None:
        key = id(st)
        if key in self._refs or key in self._host:
            return
        nbytes = st.nbytes()
        if nbytes == 0:
            return
        self._take(key, nbytes)
        self._refs[key] = weakref.ref(st, functools.partial(self._freed, key))

    def _take(self, key: int, nbytes: int) -> None:
        self._next += 1
        token = self._next
        self._tokens[key] = token
        self.allocator.malloc(token, nbytes)
        self._sizes[token] = nbytes
        self.live_bytes += nbytes
        if self.current is not None:
            self.current.peak_allocated = max(self.current.peak_allocated, self.allocator.allocated)
            self.current.peak_bytes = max(self.current.peak_bytes, self.live_bytes)

    def _release(self, key: int) -> None:
        token = self._tokens.pop(key, None)
        if token is not None:
            self.live_bytes -= self._sizes.pop(token, 0)
            self.allocator.free(token)

    def resized(self, st: Any) -> None:
        """A storage's size changed in place: a tracked one's block goes back to the allocator and one of the new
        size is taken (none at 0 bytes), an untracked one is counted from now on, as any new storage."""
        key = id(st)
        if key in self._host or (self.fake_mode is not None and st.device.type != "meta"):
            return
        if key not in self._refs:
            if self._host_depth:
                self._mark_host(st)
            else:
                self._storage(st)
            return
        self._release(key)
        if st.nbytes():
            self._take(key, st.nbytes())

    def _freed(self, key: int, _ref: Any = None) -> None:
        self._refs.pop(key, None)
        self._release(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.on_op is not None:
            self.on_op()
        t = args[0] if func is SCALAR else None
        if is_traceable_wrapper_subclass(t):  # a value read from a DTensor (FSDP's gradient norm): its local's
            t = getattr(t, t.__tensor_flatten__()[0][0])
        if func is SCALAR and self.invent_scalars and isinstance(t, FakeTensor):
            where = _caller()
            self.invented[where] = self.invented.get(where, 0) + 1
            if self.invented[where] > MAX_READS:
                raise DataDependent(where, self.invented[where])
            # 1 (a loss, a norm, a count, an optimizer's step: safe to divide by), True (an isfinite(...).all()),
            # except the fp16 grad scaler's found_inf, read as 0.0 so that the optimizer step happens as it would,
            # and False for an any() (``while mask.any(): resample``: nothing left to do, as a check that finds none)
            if t.dtype == torch.bool:
                return not any(t is a for a in self._any)
            if t.dtype.is_floating_point:
                return 0.0 if where == GRAD_SCALER else 1.0
            return 1
        if func is PIN:
            # pinned host memory: page-locked RAM, never the device's (and no CPU-only build can pin any), so the
            # tensor stands for its pinned copy; the copy to the device that follows is counted as any other
            return args[0]
        if self.fake_mode is None:
            out = func(*args, **kwargs)
        else:
            try:
                out = func(*args, **kwargs)
            except Exception as exc:
                out = self._on_cpu(func, args, kwargs, exc)
        self.see(out)
        if func in ANY and isinstance(out, FakeTensor):
            self._any.append(out)
        if self.workspace is not None and self.current is not None:
            extra = self.workspace(func, args, kwargs, out)
            if extra:  # held while the kernel runs, beside its outputs: a peak, never live after it
                seg = self.current
                seg.peak_bytes = max(seg.peak_bytes, self.live_bytes + extra)
                seg.peak_allocated = max(seg.peak_allocated, self.allocator.allocated + rounded(extra))
        return out

    def _on_cpu(self, func: Any, args: Any, kwargs: Any, exc: Exception) -> Any:
        """The op fake tensors refused, run for real on stand-ins. Where the CPU runs it, the refusal was the fake
        kernel's (none, a data-dependent shape, or a meta kernel stricter than the real one: grouped_mm's asks
        for bfloat16 where the CPU's takes float32); where the CPU refuses too, it is the task's own error (a
        shape that does not match), raised as it would be on the GPU, unless fake tensors could not run it at all."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        name = str(func)
        with unset_fake_temporarily():
            real = tree_map_only(torch.Tensor, _stand_in, (args, kwargs))
            try:
                out = func(*real[0], **real[1])
            except Exception as cpu_exc:  # noqa: BLE001 - the real op fails too: nothing can stand in for it
                if not cannot_fake(exc):
                    raise exc from None  # the task's own error
                raise Unfakeable(name, exc, cpu_exc) from None
        fb = self.fallbacks.setdefault(name, Fallback(name, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"))
        flat, _ = tree_flatten(out)
        fb.calls += 1
        fb.output_bytes += sum(t.untyped_storage().nbytes() for t in flat if isinstance(t, torch.Tensor))
        return tree_map_only(torch.Tensor, self.fake_mode.from_tensor, out)


def cannot_fake(exc: BaseException) -> bool:
    """Whether an error says that fake tensors cannot run the op (no fake or meta kernel, a data-dependent shape),
    rather than that the op's inputs are wrong."""
    from torch._subclasses import fake_tensor as ft

    kinds = (
        ft.UnsupportedOperatorException,
        ft.DynamicOutputShapeException,
        ft.DataDependentOutputException,
        ft.UnsupportedFakeTensorException,
    )
    text = str(exc)
    return isinstance(exc, kinds) or any(
        s in text for s in ("fake impl", "fake kernel", "'Meta' backend", "meta kernel")
    )


def _stand_in(t: torch.Tensor) -> torch.Tensor:
    """A real tensor with the fake one's shape, dtype and strides: ones for masks, zeros for indices, noise else."""
    real = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    if t.dtype == torch.bool:
        return real.fill_(True)
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return real.normal_()
    return real.zero_()


MACHINERY = ("/torch/utils/", "/torch/_", "/torch/overrides.py", "/cockpit/estimate/")


def _caller() -> str:
    """Who read a value from a tensor: torch's grad scaler when it is the reader, else the innermost frame outside
    torch and this package (the user's code, or the pilot's)."""
    frames = [f.filename.replace("\\", "/") for f in reversed(traceback.extract_stack(limit=40))]
    reader = next((p for p in frames if not any(m in p for m in MACHINERY)), "")
    if reader.endswith("/" + GRAD_SCALER):
        return GRAD_SCALER
    for frame in reversed(traceback.extract_stack(limit=40)):
        path = frame.filename.replace("\\", "/")
        if "/torch/" in path or "/cockpit/estimate/" in path:
            continue
        return f"{path.rsplit('/', 2)[-2] if path.count('/') > 1 else ''}/{path.rsplit('/', 1)[-1]}:{frame.lineno}"
    return "?"
