"""From traces to the estimate a user reads: per-phase allocated, reserved and NVML-visible memory, and the
largest microbatch that fits each GPU size with the pilot's headroom (the selection sheet's rule:
``(reserved + context) x (1 + headroom) <= size``, sizes in decimal GB)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from ..contract import Params
from ..notebook.settings import Settings
from ..termout import Block
from . import gpu
from .allocator import segment_size
from .strategy import NOT_MODELLED, Strategy
from .trace import Trace

MIB = 2**20
GPU_SIZES_GB = (16, 24, 40, 48, 80, 94, 141)
# --gpu NAME: the memory sizes of common cards (nominal GB); a plain number ("24", "24GB") works too
GPU_NAMES: dict[str, int] = {
    "T4": 16, "V100": 16, "V100-32": 32, "A10G": 24, "L4": 24, "RTX3090": 24, "RTX4090": 24, "A100-40": 40,
    "A40": 48, "L40S": 48, "A6000": 48, "RTX6000ADA": 48, "A100-80": 80, "A100": 80, "H100": 80, "H100-NVL": 94,
    "H200": 141, "GH200": 96, "B200": 180,
}  # fmt: skip
LIMIT = 1 << 16  # the largest microbatch the table searches
LENGTH_LIMIT = 1 << 24  # the longest length the table searches


@dataclass
class PhaseRow:
    name: str
    inputs: str
    allocated_mib: float
    reserved_mib: float
    nvml_mib: float
    cpu_allocated_mib: float | None = None  # the same phase traced with the CPU's semantics (what the GPU changed)


@dataclass
class Fit:
    gpu: str
    size_gb: int
    capacity_mib: float
    need_mib: float  # at the campaign's microbatch, headroom included
    fits: bool
    largest_microbatch: int  # 0: not even 1
    at_least: bool = False  # memory did not grow measurably between the traces: the largest traced, a lower bound
    longest_length: int = (
        0  # the longest max_length that fits at the campaign's microbatch (0: not even 1; -1: not traced)
    )
    length_at_least: bool = False  # as at_least, for the length


class FallbackRow(TypedDict):
    """An operation the trace ran on the CPU instead (fake tensors could not run it), as the estimate records it."""

    op: str
    why: str
    calls: int
    output_mib: float


@dataclass
class Estimate:
    campaign: str
    variant: str
    microbatch: int
    accumulation: int
    precision: str
    parameters: int
    trainable: int
    optimizer: str
    phases: list[PhaseRow]
    peak_phase: str
    peak_allocated_mib: float
    headroom: float
    fits: list[Fit]
    modelled: list[str]
    fallbacks: list[FallbackRow] = field(default_factory=list)
    invented: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    second_microbatch: int = 0
    length: int = 0  # the campaign's max_length (the length axis), 0 when the task has no length parameter
    second_length: int = 0
    length_param: str = ""  # the [task.params] key that is the length
    strategy: str = "one GPU"  # the sheet's strategy; the figures are one rank's
    gpus: int = 1
    not_modelled: list[str] = field(default_factory=list)


def gpu_size(name: str) -> tuple[str, int]:
    """``--gpu`` NAME as (label, nominal GB); ValueError names the known cards."""
    key = name.strip().upper().replace(" ", "")
    if key in GPU_NAMES:
        return key, GPU_NAMES[key]
    digits = key.removesuffix("GB")
    if digits.isdigit() and int(digits) > 0:
        return f"{int(digits)} GB", int(digits)
    raise ValueError(f"unknown GPU {name!r}: give a size in GB (24, 80GB) or one of {', '.join(sorted(GPU_NAMES))}")


def _extra_mib() -> float:
    """Outside torch's allocator: the CUDA context and what the first step loads."""
    return gpu.CONTEXT_MIB + gpu.LIBRARIES_MIB


def rows(t: Trace) -> list[PhaseRow]:
    ws = gpu.CUBLAS_WORKSPACE_MIB if t.gpu else 0.0
    ws_segment = segment_size(int(ws * MIB)) / MIB if ws else 0.0
    out = []
    for p in t.phases:
        alloc = p.peak_allocated / MIB + ws
        reserved = p.reserved / MIB + ws_segment
        out.append(PhaseRow(p.name, p.inputs, alloc, reserved, reserved + _extra_mib()))
    return out


def _largest(
    main: Trace, other: Trace | None, x_main: int, x_other: int, headroom: float, cap: float, limit: int
) -> tuple[int, bool]:
    """The largest x (a microbatch, a length) with need(x) <= cap, need linear in x between the two traces (per
    phase, on reserved; on allocated where reserved did not move, as a small model's reserved stays inside one 2 MiB
    segment while its activations still grow); (bound, at_least). Where no phase grew measurably, the bound is the
    largest x traced, a lower bound: memory that did not grow is no evidence that any x fits."""
    a, b = rows(main), rows(other) if other is not None else None
    lines: list[tuple[float, float]] = []  # (reserved at x = 0, per unit of x)
    for i, r in enumerate(a):
        if b is None or x_other == x_main:
            lines.append((r.reserved_mib, 0.0))
            continue
        dx = x_main - x_other
        slope = max(0.0, (r.reserved_mib - b[i].reserved_mib) / dx)
        if slope == 0.0:
            slope = max(0.0, (r.allocated_mib - b[i].allocated_mib) / dx)
        lines.append((r.reserved_mib - slope * x_main, slope))

    def need(x: int) -> float:
        return (max(c + s * x for c, s in lines) + _extra_mib()) * (1.0 + headroom)

    here = (max(r.reserved_mib for r in a) + _extra_mib()) * (1.0 + headroom)
    if not (any(s > 0 for _, s in lines) and b is not None):
        return (max(x_main, x_other), True) if here <= cap else (0, False)
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lo, False


def fits(
    main: Trace,
    other: Trace | None,
    headroom: float,
    sizes: list[tuple[str, int]] | None = None,
    shorter: Trace | None = None,
    lengths: tuple[int, int] = (0, 0),
) -> list[Fit]:
    """Each size: does the campaign fit, the largest microbatch at its length (between the traces ``main`` and
    ``other``, at two microbatches) and the longest length at its microbatch (between ``main`` and ``shorter``, traced
    at ``lengths`` = (the campaign's max_length, a shorter one)), each linear between its two traces."""
    a = rows(main)
    out = []
    for label, gb in sizes or [(f"{g} GB", g) for g in GPU_SIZES_GB]:
        cap = gb * 1e9 / MIB
        here = (max(r.reserved_mib for r in a) + _extra_mib()) * (1.0 + headroom)
        m2 = other.microbatch if other is not None else main.microbatch
        largest, at_least = _largest(main, other, main.microbatch, m2, headroom, cap, LIMIT)
        longest, length_at_least = -1, False
        if shorter is not None and lengths[0]:
            longest, length_at_least = _largest(main, shorter, lengths[0], lengths[1], headroom, cap, LENGTH_LIMIT)
        out.append(Fit(label, gb, cap, here, here <= cap, largest, at_least, longest, length_at_least))
    return out


def modelled(t: Trace) -> list[str]:
    out = []
    if t.gpu:
        if t.autocast_calls:
            out.append(
                f"autocast: CUDA's policy from {gpu.POLICY_SOURCE} ({t.autocast_calls} lower-precision calls "
                "traced; float32 for layer_norm, softmax and the losses; cross_entropy, in no CUDA list, "
                "decomposed: log_softmax in the input's type, nll_loss on a float32 copy), weight copies cached "
                "per forward"
            )
        if t.kernels:
            k = ", ".join(f"{n} x {c}" for n, c in sorted(t.kernels.items()))
            out.append(
                f"attention: {k} (the kernel CUDA's SDPA would pick; flash and memory-efficient keep O(T), math "
                "keeps the T x T scores)"
            )
        out += t.notes
        out.append(
            f"cuBLAS workspace {gpu.CUBLAS_WORKSPACE_MIB:.0f} MiB in allocated and reserved (torch's default on "
            "Hopper, through the caching allocator)"
        )
    if t.expandable:
        out.append(
            "reserved: a model of the CUDA caching allocator with expandable_segments:True (PYTORCH_CUDA_ALLOC_CONF "
            "here): 512 B blocks, one growing segment per pool mapped in 2 MiB (small) and 20 MiB (large) pages, "
            "best fit with splitting, no empty_cache"
        )
    else:
        out.append(
            "reserved: a model of the CUDA caching allocator (512 B blocks, 2 MiB small-pool segments, 20 MiB "
            "segments under 10 MiB, 2 MiB-rounded segments above, best fit with splitting, no empty_cache; "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True here models those instead)"
        )
    out.append(
        f"NVML-visible = reserved + CUDA context {gpu.CONTEXT_MIB:.0f} MiB + kernels and libraries loaded by the "
        f"first step {gpu.LIBRARIES_MIB:.0f} MiB (both measured once on an H200, torch 2.11; other GPUs and "
        "versions differ by a few hundred MiB)"
    )
    return out


def build(
    main: Trace,
    other: Trace | None,
    *,
    campaign: str,
    variant: str,
    params: Params,
    headroom: float,
    sizes: list[tuple[str, int]] | None = None,
    cpu: Trace | None = None,
    shorter: Trace | None = None,
    lengths: tuple[int, int] = (0, 0),
    length_param: str = "",
    strategy: Strategy | None = None,
) -> Estimate:
    settings = Settings(params)
    strategy = strategy or Strategy()
    rs = rows(main)
    if cpu is not None:
        ws = gpu.CUBLAS_WORKSPACE_MIB  # the same on both sides: the column shows what the semantics changed
        on_cpu = {p.name: p.peak_allocated / MIB + ws for p in cpu.phases}
        for r in rs:
            r.cpu_allocated_mib = on_cpu.get(r.name)
    peak = max(rs, key=lambda r: r.allocated_mib)
    fbs: list[FallbackRow] = [
        {"op": f.op, "why": f.why, "calls": f.calls, "output_mib": f.output_bytes / MIB}
        for t in (main, other)
        if t is not None
        for f in t.fallbacks
    ]
    return Estimate(
        campaign=campaign,
        variant=variant,
        microbatch=main.microbatch,
        accumulation=settings.accumulation,
        precision=settings.precision,
        parameters=main.parameters,
        trainable=main.trainable,
        optimizer=main.optimizer,
        phases=rs,
        peak_phase=peak.name,
        peak_allocated_mib=peak.allocated_mib,
        headroom=headroom,
        fits=fits(main, other, headroom, sizes, shorter, lengths),
        modelled=modelled(main),
        fallbacks=fbs,
        invented=main.invented,
        seconds=main.seconds + (other.seconds if other is not None else 0.0),
        second_microbatch=other.microbatch if other is not None else 0,
        length=lengths[0] if shorter is not None else 0,
        second_length=lengths[1] if shorter is not None else 0,
        length_param=length_param if shorter is not None else "",
        strategy=strategy.name,
        gpus=strategy.gpus,
        not_modelled=not_modelled(strategy),
    )


def not_modelled(strategy: Strategy) -> list[str]:
    """What the estimate leaves out, said in every estimate."""
    return [m for m in (strategy.missing(), NOT_MODELLED) if m]


def bound(x: int, at_least: bool, limit: int) -> str:
    """A table's bound, always a number: "at least N, the largest traced" where memory did not grow between the
    traces, "more than N" at the search's end (N the largest searched), "none: not even 1"."""
    if at_least:
        return f"at least {x:,}, the largest traced"
    if x == 0:
        return "none: not even 1"
    if x >= limit:
        return f"more than {limit:,}"
    return f"{x:,}"


def _count(n: int) -> str:
    return f"{n / 1e9:,.2f} B" if n >= 1e9 else f"{n / 1e6:,.1f} M" if n >= 1e6 else f"{n:,}"


def _ranks(e: Estimate) -> str:
    if e.strategy in ("DDP", "FSDP") and e.gpus > 1:
        return f", per rank of {e.strategy} over {e.gpus} GPUs"
    return ""


def render(e: Estimate) -> list[str]:
    """The estimate as text lines, its tables in fixed columns (a file, a log)."""
    return [x for x in blocks(e, tables=False) if isinstance(x, str)]


def blocks(e: Estimate, tables: bool = True) -> list[str | Block]:
    """The estimate as prose lines and, with ``tables``, its two tables as :class:`~cockpit.termout.Block`s,
    which a terminal fits to its width (the fixed columns ran to 160 characters)."""
    cpu_col = any(r.cpu_allocated_mib is not None for r in e.phases)
    phase_block = Block(
        [
            "phase",
            "input",
            "allocated MiB",
            "reserved MiB",
            "NVML-visible MiB",
            *(["CPU semantics MiB"] if cpu_col else []),
        ],
        [
            [
                r.name,
                r.inputs,
                f"{r.allocated_mib:,.0f}",
                f"{r.reserved_mib:,.0f}",
                f"{r.nvml_mib:,.0f}",
                *([] if not cpu_col else ["" if r.cpu_allocated_mib is None else f"{r.cpu_allocated_mib:,.0f}"]),
            ]
            for r in e.phases
        ],
        right={"allocated MiB", "reserved MiB", "NVML-visible MiB", "CPU semantics MiB"},
        drop=["CPU semantics MiB", "input", "NVML-visible MiB"],
    )
    out: list[str | Block] = [
        f"Estimate for {e.campaign}, variant {e.variant}{_ranks(e)}: {_count(e.parameters)} parameters "
        f"({_count(e.trainable)} trainable), {e.precision}, microbatch {e.microbatch} x accumulation "
        f"{e.accumulation}; {e.optimizer}.",
        f"Traced on fake tensors in {e.seconds:.1f} s (no GPU memory was used; no GPU was needed).",
        "",
    ]
    if tables:
        out.append(phase_block)
    else:
        out.append(
            f"  {'phase':<14} {'input':<30} {'allocated':>11} {'reserved':>11} {'NVML-visible':>13}"
            + (f" {'CPU semantics':>14}" if cpu_col else "")
        )
    for r in e.phases if not tables else []:
        cpu = "" if r.cpu_allocated_mib is None else f"{r.cpu_allocated_mib:>10,.0f} MiB"
        out.append(
            f"  {r.name:<14} {r.inputs[:30]:<30} {r.allocated_mib:>7,.0f} MiB {r.reserved_mib:>7,.0f} MiB "
            f"{r.nvml_mib:>9,.0f} MiB" + (f" {cpu:>14}" if cpu else "")
        )
    moved = [
        f"{r.name} {r.allocated_mib - r.cpu_allocated_mib:+,.0f} MiB"
        for r in e.phases
        if r.cpu_allocated_mib is not None
        and abs(r.allocated_mib - r.cpu_allocated_mib) >= max(1.0, 0.01 * r.allocated_mib)
    ]
    if any(r.cpu_allocated_mib is not None for r in e.phases):
        out.append(
            "  (CPU semantics: allocated when traced with the CPU's autocast, attention and optimizer paths; "
            + (
                "the GPU model moved " + ", ".join(moved) + ")"
                if moved
                else "the GPU model moved no phase by 1 % or more)"
            )
        )
    out += ["", f"Peak allocated: {e.peak_allocated_mib:,.0f} MiB in {e.peak_phase}.", "", "Modelled:"]
    out += [f"  - {m}" for m in e.modelled]
    out += ["", "Not modelled:"] + [f"  - {m}" for m in e.not_modelled]
    if e.fallbacks:
        out += ["", "Measured on the CPU instead (fake tensors cannot run these operations):"]
        out += [
            f"  - {f['op']} x {f['calls']}: {f['why']}; its outputs, {f['output_mib']:,.1f} MiB, counted as measured"
            for f in e.fallbacks
        ]
    user_reads = {w: n for w, n in e.invented.items() if not w.startswith("pilot/")}
    if user_reads:
        where = ", ".join(f"{w} ({n}x)" for w, n in user_reads.items())
        out += [
            "",
            f"Values read from tensors in the task's code were answered with 1 (fake tensors have none): {where}. "
            "If a shape depends on such a value, this estimate is wrong for it; the pilot measures it.",
        ]
    how = (
        f"linear in the microbatch between traces at {e.microbatch} and {e.second_microbatch}"
        if e.second_microbatch
        else "at the campaign's microbatch only"
    )
    along = (
        f"; longest length ({e.length_param}) at microbatch {e.microbatch}, linear in it between traces at "
        f"{e.length:,} and {e.second_length:,}, memory only: the model's own limit, its positions, is not checked"
        if e.length
        else ""
    )
    out += [
        "",
        f"Fits (need = (reserved + context) x {1 + e.headroom:.2f}, [pilot] headroom {e.headroom:.0%}; "
        f"largest microbatch at the campaign's length {how}{along}):",
    ]
    length_col = bool(e.length)
    fit_rows: list[list[str]] = []
    if not tables:
        out.append(
            f"  {'GPU':<10} {'capacity':>12} {'need now':>12}  {'fits':<5} {'largest microbatch':<36}"
            + (" longest length" if length_col else "")
        )
    for f in e.fits:
        largest = bound(f.largest_microbatch, f.at_least, LIMIT)
        longest = bound(f.longest_length, f.length_at_least, LENGTH_LIMIT) if length_col else ""
        fit_rows.append(
            [
                f.gpu,
                f"{f.capacity_mib:,.0f}",
                f"{f.need_mib:,.0f}",
                "yes" if f.fits else "no",
                largest,
                *([longest] if length_col else []),
            ]
        )
        if not tables:
            out.append(
                f"  {f.gpu:<10} {f.capacity_mib:>8,.0f} MiB {f.need_mib:>8,.0f} MiB  {'yes' if f.fits else 'no':<5} "
                f"{largest:<36}" + (f" {longest}" if length_col else "")
            )
    if tables:
        heads = ["GPU", "capacity MiB", "need now MiB", "fits", "largest microbatch"]
        heads += ["longest length"] if length_col else []
        out.append(Block(heads, fit_rows, right={"capacity MiB", "need now MiB"}, drop=["capacity MiB"]))
    out += [
        "",
        "An estimate, not a measurement: `cockpit pilot` on the GPU measures every phase, and `cockpit sheet` sizes "
        "from what it measured.",
    ]
    return out
