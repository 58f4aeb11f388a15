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


def fits(main: Trace, other: Trace | None, headroom: float, sizes: list[tuple[str, int]] | None = None) -> list[Fit]:
    """Each size: does the campaign's microbatch fit, and the largest that does, linear in the microbatch
    between the two traces (per phase, on reserved; on allocated where reserved did not move, as a small model's
    reserved stays inside one 2 MiB segment while its activations still grow).

    Where no phase grew measurably between the two traces, the bound is the largest microbatch traced
    (``at_least``): memory that did not grow from 1 to 2 examples is no evidence that any microbatch fits."""
    a, b = rows(main), rows(other) if other is not None else None
    lines: list[tuple[float, float]] = []  # (reserved at microbatch 0, per example)
    for i, r in enumerate(a):
        if b is None or other is None or other.microbatch == main.microbatch:
            lines.append((r.reserved_mib, 0.0))
            continue
        dm = main.microbatch - other.microbatch
        slope = max(0.0, (r.reserved_mib - b[i].reserved_mib) / dm)
        if slope == 0.0:
            slope = max(0.0, (r.allocated_mib - b[i].allocated_mib) / dm)
        lines.append((r.reserved_mib - slope * main.microbatch, slope))

    def need(m: int) -> float:
        return (max(c + s * m for c, s in lines) + _extra_mib()) * (1.0 + headroom)

    grows = any(s > 0 for _, s in lines) and b is not None
    traced = max(main.microbatch, other.microbatch if other is not None else 0)
    out = []
    for label, gb in sizes or [(f"{g} GB", g) for g in GPU_SIZES_GB]:
        cap = gb * 1e9 / MIB
        here = (max(r.reserved_mib for r in a) + _extra_mib()) * (1.0 + headroom)
        if not grows:
            out.append(Fit(label, gb, cap, here, here <= cap, traced if here <= cap else 0, at_least=here <= cap))
            continue
        lo, hi = 0, LIMIT
        while lo < hi:  # the largest m with need(m) <= cap
            mid = (lo + hi + 1) // 2
            if need(mid) <= cap:
                lo = mid
            else:
                hi = mid - 1
        out.append(Fit(label, gb, cap, here, here <= cap, lo))
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
    out.append(
        "reserved: a model of the CUDA caching allocator (512 B blocks, 2 MiB small-pool segments, 20 MiB segments "
        "under 10 MiB, 2 MiB-rounded segments above, best fit with splitting, no empty_cache)"
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
) -> Estimate:
    settings = Settings(params)
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
        fits=fits(main, other, headroom, sizes),
        modelled=modelled(main),
        fallbacks=fbs,
        invented=main.invented,
        seconds=main.seconds + (other.seconds if other is not None else 0.0),
        second_microbatch=other.microbatch if other is not None else 0,
    )


def _count(n: int) -> str:
    return f"{n / 1e9:,.2f} B" if n >= 1e9 else f"{n / 1e6:,.1f} M" if n >= 1e6 else f"{n:,}"


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
        f"Estimate for {e.campaign}, variant {e.variant}: {_count(e.parameters)} parameters "
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
    out += [
        "",
        f"Fits (need = (reserved + context) x {1 + e.headroom:.2f}, [pilot] headroom {e.headroom:.0%}; "
        f"largest microbatch {how}):",
    ]
    fit_rows: list[list[str]] = []
    if not tables:
        out.append(f"  {'GPU':<10} {'capacity':>12} {'need now':>12}  {'fits':<5} largest microbatch")
    for f in e.fits:
        largest = (
            f"at least {f.largest_microbatch:,}, the largest traced"
            if f.at_least
            else "none: not even 1"
            if f.largest_microbatch == 0
            else f"{f.largest_microbatch:,}"
            + (f"+ (searched up to {LIMIT:,})" if f.largest_microbatch >= LIMIT else "")
        )
        fit_rows.append([f.gpu, f"{f.capacity_mib:,.0f}", f"{f.need_mib:,.0f}", "yes" if f.fits else "no", largest])
        if not tables:
            out.append(
                f"  {f.gpu:<10} {f.capacity_mib:>8,.0f} MiB {f.need_mib:>8,.0f} MiB  {'yes' if f.fits else 'no':<5} "
                f"{largest}"
            )
    if tables:
        heads = ["GPU", "capacity MiB", "need now MiB", "fits", "largest microbatch"]
        out.append(Block(heads, fit_rows, right={"capacity MiB", "need now MiB"}, drop=["capacity MiB"]))
    out += [
        "",
        "An estimate, not a measurement: `cockpit pilot` on the GPU measures every phase, and `cockpit sheet` sizes "
        "from what it measured.",
    ]
    return out
