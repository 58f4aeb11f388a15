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

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
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
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        stream = _without_backend(prof)
    else:
        stream = []  # (ns, order, what): marks, then allocations and frees
        for e in prof.profiler.kineto_results.events():
            name = e.name()
            if name == "[memory]":
                stream.append((e.start_ns(), 1, str(e.nbytes())))
            elif name.startswith(MARK):
                stream.append((e.start_ns(), 0, name.removeprefix(MARK)))
    stream.sort()
    return Measured(t, peaks(stream))


def _without_backend(prof: Any) -> list[tuple[int, int, str]]:
    """The stream of a distributed rank, less the collective backend's own buffers: gloo copies a collective's
    tensors inside c10d's op and on its worker threads. NCCL's buffers on a GPU are never the caching allocator's,
    so the estimate has none: an allocation made inside a ``c10d::`` op, or on a thread that ran ``gloo:`` work,
    is left out, with its free (matched by address; only the profiler's exported trace has addresses).

    One thing this cannot mend: gloo's worker holds a collective's tensors until after its profiled scope, and
    when it is the last to let go the free is never recorded, so the tensor looks live until its address is
    taken again. Such a miss only ever adds; a caller that needs the figure exact measures more than once and
    takes the least (``tests/estimate/ddp_ranks.py``)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    backend = {e["tid"] for e in spans if str(e.get("name", "")).startswith("gloo:")}
    ops: dict[Any, list[tuple[float, float]]] = {}
    for e in spans:
        if str(e.get("name", "")).startswith("c10d::"):
            ops.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e.get("dur", 0)))
    holders: dict[Any, tuple[bool, int]] = {}  # address -> (the backend's, bytes) of what holds it now
    late: dict[Any, int] = {}  # address -> frees still to come for holders already ended
    stream: list[tuple[int, int, str]] = []
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        name = str(e.get("name", ""))
        ns = int(round(float(e.get("ts", 0)) * 1000))
        if name.startswith(MARK):
            stream.append((ns, 0, name.removeprefix(MARK)))
            continue
        if name != "[memory]":
            continue
        addr, nbytes = e["args"].get("Addr"), int(e["args"]["Bytes"])
        # threads stamp their events apart, so a free on one can sort after the next allocation of its address on
        # another: an allocation at an address still held ends the holder there, and that free, when it comes, is
        # the ended holder's
        if nbytes > 0:
            held = holders.pop(addr, None)
            if held is not None:
                late[addr] = late.get(addr, 0) + 1
                if not held[0]:
                    stream.append((ns, 1, str(-held[1])))
            ours = e["tid"] not in backend and not any(a <= e["ts"] <= b for a, b in ops.get(e["tid"], ()))
            holders[addr] = (not ours, nbytes)
            if ours:
                stream.append((ns, 1, str(nbytes)))
        elif late.get(addr):
            late[addr] -= 1
        else:
            held = holders.pop(addr, None)
            if held is None or not held[0]:  # ours, or made before the profile began
                stream.append((ns, 1, str(nbytes)))
    return stream


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
