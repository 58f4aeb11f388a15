"""The estimate's check on the CPU: the same phases run on real CPU tensors and measured by torch's own accounting,
never by the trace's counter.

On the CPU torch keeps no allocator statistics (``torch.cuda.max_memory_allocated`` has no CPU twin), but its
profiler, with ``profile_memory=True``, records every allocation and free c10's CPU allocator makes (the
``[memory]`` events, with their sizes). :func:`measure` runs the pilot's phases for real
(:func:`~.trace.run` with ``fake=False`` and the CPU's semantics) under the profiler, the counter marking each
phase's start and end in it, and replays the events: a phase's peak is the most bytes live between its marks,
counted from the start of the first phase. That sees what the counter cannot: a kernel's own temporaries, and
anything allocated outside the dispatcher. What it compares with is the fake trace's unrounded bytes
(:attr:`~.trace.PhaseMemory.peak_bytes`) under the same CPU semantics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..contract import Params
from .counter import MARK
from .strategy import Strategy
from .trace import Trace, run


@dataclass
class Measured:
    trace: Trace  # the real run's own trace (its counter's figures, beside torch's)
    peaks: dict[str, int]  # phase -> the most bytes c10's CPU allocator held in it, from the first phase's start


def measure(
    task: Any,
    params: Params,
    *,
    seed: int = 0,
    microbatch: int | None = None,
    strategy: Strategy | None = None,
    rank: int = 0,
) -> Measured:
    """The phases run for real and measured by torch's profiler; with a DDP ``strategy``, this process is ``rank``
    of it, in the process group the caller made (gloo, on the CPU), and the figures are that rank's."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        t = run(
            task,
            params,
            seed=seed,
            microbatch=microbatch,
            gpu_semantics=False,
            fake=False,
            mark=True,
            strategy=strategy,
            rank=rank,
        )
    events = prof.profiler.kineto_results.events()
    stream: list[tuple[int, int, str]] = []  # (ns, order, what): marks, then allocations and frees
    for e in events:
        name = e.name()
        if name == "[memory]":
            stream.append((e.start_ns(), 1, str(e.nbytes())))
        elif name.startswith(MARK):
            stream.append((e.start_ns(), 0, name.removeprefix(MARK)))
    stream.sort()
    return Measured(t, peaks(stream))


def peaks(stream: list[tuple[int, int, str]]) -> dict[str, int]:
    """Replay ``(ns, kind, what)``: kind 0 is a mark (``begin:NAME`` / ``end:NAME``), kind 1 an allocation (its
    bytes) or a free (negative bytes). A phase's peak is the most live between its marks, from the first begin."""
    live = 0
    base: int | None = None
    current: str | None = None
    out: dict[str, int] = {}
    for _, kind, what in stream:
        if kind == 1:
            live += int(what)
            if current is not None:
                out[current] = max(out[current], live)
            continue
        edge, name = what.split(":", 1)
        if edge == "begin":
            if base is None:
                base = live
            current = name
            out[name] = max(out.get(name, live), live)
        elif name == current:
            current = None
    return {k: v - (base or 0) for k, v in out.items()}
