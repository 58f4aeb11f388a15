"""The selection sheet: which GPU to rent, from what a pilot measured. No torch.

Every figure on the sheet is traced to a run and a phase: the peak is the
largest torch *peak reserved* over every phase and rank of the variant's
latest passed pilot, plus the CUDA context (NVML used minus torch reserved at
the same bound; when NVML did not read it, the 621 MiB measured once on an
H200 is used and stated as an assumption), plus the notebook's headroom. A
pilot that ran on the CPU measured no GPU figure: the sheet says so and gives
the process RSS instead; it never derives a GPU number from it.

Series results (``metrics.json`` of kind "train" runs) feed the expected
result; without them the sheet says the result is not measured yet.

- :mod:`.phases`  one row per gate and rank, and what the gates say of the sizing
- :mod:`.results` the spread over seeds and the expected result, by ``cockpit compare``'s rules
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import estimates, runs
from .. import notebook as nbm
from ..compare.quality import number
from ..errors import CockpitError
from ..notebook.settings import Settings
from ..schema import JSONObject
from .phases import (
    PhaseRow,
    dimensions_of_pilot,
    dimensions_of_probe,
    inputs_text,
    others_on_gpu,
    peaks_mib,
    phase_rows,
    strategy_of,
    truncated_examples,
)
from .results import Spread, expected_result, fmt_spread, metric_value, spread

__all__ = [
    "ASSUMED_CONTEXT_MIB",
    "GPU_SIZES_GB",
    "MIB",
    "Fit",
    "PhaseRow",
    "RunFiles",
    "Sheet",
    "SheetError",
    "Spread",
    "build",
    "campaign_runs",
    "expected_result",
    "fmt_spread",
    "latest_measured",
    "latest_passed_pilot",
    "metric_value",
    "peaks_mib",
    "phase_rows",
    "render",
    "selection_of",
    "series_runs",
    "spread",
]


MIB = 2**20
# Common GPU memory sizes, in nominal (decimal) GB. Capacity is taken as
# size x 10^9 bytes: every card sold under these sizes reports at least that
# much (an A10G "24 GB" reports 23,028 MiB > 22,888 MiB), so a fit is never
# claimed on a card that turns out smaller.
GPU_SIZES_GB = (24, 40, 48, 80, 141)
# Measured once (one H200, torch 2.11, see DESIGN.md): NVML-visible memory of a
# CUDA context that torch's allocator never reports.
ASSUMED_CONTEXT_MIB = 621.0


class SheetError(CockpitError):
    """No pilot to build a sheet from (the message says which to run)."""


# --------------------------------------------------------------------------- runs on disk


RunFiles = runs.RunFiles
campaign_runs = runs.campaign_runs
latest_passed_pilot = runs.latest_passed_pilot
latest_measured = runs.latest_measured  # a passed pilot, or a passed probe of the user's own script
series_runs = runs.training_runs


# --------------------------------------------------------------------------- the sheet


@dataclass
class Fit:
    size_gb: int
    capacity_mib: float
    fits: bool | None  # None: no GPU figure measured


@dataclass
class Sheet:
    campaign: str
    variant: str
    run_id: str
    run_dir: Path
    device: str
    gpu_name: str
    gpu_total_mib: float | None
    stack_passed: bool
    stack_detail: str
    measured_gpu: bool
    peak_reserved_mib: float | None = None
    peak_phase: str = ""
    peak_inputs: JSONObject = field(default_factory=dict)
    peak_rank: int | None = None
    context_mib: float | None = None
    context_source: str = ""
    others_mib: float = 0.0  # GPU memory other processes held when the pilot measured (kept out of the sizing)
    headroom: float = 0.0
    need_mib: float | None = None
    rss_peak_mib: float | None = None
    rss_phase: str = ""
    rss_inputs: JSONObject = field(default_factory=dict)
    phases: list[PhaseRow] = field(default_factory=list)
    max_dimensions: str = ""
    precision: str = ""
    microbatch: int | None = None
    accumulation: int | None = None
    strategy: str = ""
    gpus: int = 1
    fits: list[Fit] = field(default_factory=list)
    recommendation: str = ""
    expected_result: str = ""
    same_experiment: bool = True
    truncation: str = ""
    optimizer_state: str = ""  # what the optimizer held after its first step, and for which parameters
    notes: list[str] = field(default_factory=list)
    noun: str = "pilot"  # "probe" when the figures come from a probed script
    estimate: str = ""  # the saved `cockpit estimate` beside what this pilot measured, with the ratio

    @property
    def smallest_fit(self) -> Fit | None:
        return next((f for f in self.fits if f.fits), None)


def _mib(x: float | None) -> str:
    return "not measured" if x is None else f"{x:,.0f} MiB"


def build(nb: nbm.Notebook, variant: str | None = None, all_runs: list[RunFiles] | None = None) -> Sheet:
    """The selection sheet of a variant (default: the reference) from its latest passed pilot (or probe)."""
    vid = variant or nb.reference.id
    nb.variant(vid)  # a clear error for an unknown variant
    cdir = nb.directory
    all_runs = campaign_runs(cdir) if all_runs is None else all_runs
    pilot = latest_measured(all_runs, vid)
    if pilot is None:
        tried = [r for r in all_runs if r.kind in runs.MEASURED_KINDS and r.variant == vid]
        seen = "; ".join(f"{r.id} {r.status}: {r.stop_reason}" for r in tried) or "none"
        raise SheetError(
            f"no passed pilot of variant {vid!r} in {runs.runs_dir(cdir)} (pilots and probes of it: {seen}). "
            f"A sheet is built from measurements only: run `cockpit pilot {cdir} --variant {vid}` "
            f"(or `cockpit probe {cdir} -- python train.py` for a script of your own) until every gate passes."
        )
    stack = pilot.stack
    params = pilot.params
    gpus_info = stack.get("gpus") or []
    stack_gate = pilot.gate("stack")
    gpu_stack = (
        bool(stack.get("cuda_available")) and bool(gpus_info) and str(stack.get("device", "")).startswith("cuda")
    )
    stack_passed = bool(stack_gate and stack_gate.get("verdict") in ("pass", "warn")) and gpu_stack
    build_s = f"torch {stack.get('torch', '?')} ({stack.get('build', '?')} build)"
    if gpu_stack:
        g0 = gpus_info[0]
        stack_detail = (
            f"{build_s}, CUDA {stack.get('cuda')}, driver {stack.get('driver') or 'not read'}, "
            f"{len(gpus_info)} x {g0.get('name')} ({g0.get('total', 0) / MIB:,.0f} MiB, "
            f"capability {g0.get('capability')}), bf16 {stack.get('bf16')}, NCCL {stack.get('nccl')}; "
            f"stack gate {stack_gate.get('verdict') if stack_gate else 'missing'}"
        )
    else:
        stack_detail = f"{build_s} on {stack.get('device', 'cpu')}: no GPU was used by this {pilot.noun}" + (
            f" (NVML: {stack['nvml_error']})" if stack.get("nvml_error") else ""
        )
    strategy, ngpus = strategy_of(nb, Settings(params))
    sheet = Sheet(
        campaign=nb.campaign.name,
        variant=vid,
        run_id=pilot.id,
        run_dir=pilot.dir,
        device=str(stack.get("device") or "cpu"),
        gpu_name=str(gpus_info[0].get("name")) if gpus_info else "",
        gpu_total_mib=(gpus_info[0].get("total") or 0) / MIB if gpus_info else None,
        stack_passed=stack_passed,
        stack_detail=stack_detail,
        measured_gpu=False,
        headroom=float(nb.pilot.headroom),
        precision=str(params.get("precision", "")),
        microbatch=params.get("microbatch"),
        accumulation=params.get("accumulation"),
        strategy=strategy,
        gpus=ngpus,
        noun=pilot.noun,
    )
    if pilot.probed:  # the script's own settings, as the probe saw them; the notebook's [batch] is not what it ran
        sheet.precision = "the script's own"
        sheet.microbatch = _count(pilot, "forward", "microbatch")
        sheet.accumulation = _count(pilot, "update_first", "microbatches")
        sheet.strategy, sheet.gpus = "one GPU", 1
    rows = phase_rows(pilot)
    sheet.phases = rows
    sheet.max_dimensions = dimensions_of_probe(pilot) if pilot.probed else dimensions_of_pilot(pilot)
    sheet.optimizer_state = _optimizer_state(pilot)
    saved = estimates.load(cdir, vid)
    if saved is not None:
        sheet.estimate = estimates.beside(saved, *peaks_mib(rows))

    # Cockpit's own checks (a second model in the data and overfit gates) are listed per phase but never size the GPU
    sizing = [r for r in rows if r["phase"] not in runs.CHECK_PHASES] or rows
    gpu_rows = [(r, peak) for r in sizing if (peak := r["peak_reserved"]) is not None]
    rss_rows = [(r, peak) for r in sizing if (peak := r["rss_peak"]) is not None]
    if rss_rows:
        top, rss = max(rss_rows, key=lambda rp: rp[1])
        sheet.rss_peak_mib, sheet.rss_phase, sheet.rss_inputs = rss / MIB, top["phase"], top["inputs"]
    if gpu_rows:
        sheet.measured_gpu = True
        top, peak = max(gpu_rows, key=lambda rp: rp[1])
        sheet.peak_reserved_mib = peak / MIB
        sheet.peak_phase, sheet.peak_inputs, sheet.peak_rank = top["phase"], top["inputs"], top["rank"]
        # (row, NVML used, torch reserved) where NVML saw at least what torch reserved
        both = [
            (r, used, reserved)
            for r, _ in gpu_rows
            if (used := r["nvml_used"]) is not None and (reserved := r["reserved"]) is not None and used >= reserved
        ]
        at_peak = [b for b in both if b[0] is top]
        if at_peak or both:
            src, used, reserved = at_peak[0] if at_peak else max(both, key=lambda b: b[1] - b[2])
            others = others_on_gpu(pilot, src["phase"], str(stack.get("device", "cuda:0")))
            sheet.context_mib = max(0.0, used - others - reserved) / MIB
            sheet.others_mib = others / MIB
            sheet.context_source = (
                f"measured at the end of phase {src['phase']}: NVML used {used / MIB:,.0f} MiB"
                + (f" minus {others / MIB:,.0f} MiB held by other processes" if others else "")
                + f" minus torch reserved {reserved / MIB:,.0f} MiB"
                + (
                    " (this run's own memory: the device total would have sized the GPU for the others too)"
                    if others
                    else " (no other process held memory on that GPU)"
                )
            )
        else:
            sheet.context_mib = ASSUMED_CONTEXT_MIB
            sheet.context_source = (
                f"assumed {ASSUMED_CONTEXT_MIB:.0f} MiB: NVML did not read this GPU, so the context was not "
                f"measured here; {ASSUMED_CONTEXT_MIB:.0f} MiB is what one H200 with torch 2.11 showed"
            )
        base = sheet.peak_reserved_mib + sheet.context_mib
        sheet.need_mib = base * (1.0 + sheet.headroom)
        sheet.fits = [Fit(s, s * 1e9 / MIB, sheet.need_mib <= s * 1e9 / MIB) for s in GPU_SIZES_GB]
    else:
        sheet.fits = [Fit(s, s * 1e9 / MIB, None) for s in GPU_SIZES_GB]

    # A variant that fits only because its inputs are cut is another experiment.
    if not nb.variant(vid).reference:
        lost = truncated_examples(pilot)
        ref_pilot = latest_passed_pilot(all_runs, nb.reference.id)
        ref_lost = truncated_examples(ref_pilot)
        if lost and lost > 0 and not ref_lost:
            sheet.same_experiment = False
            ref_text = (
                "the reference loses none" if ref_lost == 0 else "the reference's pilot recorded no truncation figure"
            )
            sheet.truncation = (
                f"NOT THE SAME EXPERIMENT: this variant's data gate shows truncation: {lost:,} "
                f"example{'s' if lost != 1 else ''} lose target tokens ({ref_text}); it fits only on "
                f"data cut differently, so its quality answers another question and must not be "
                f"compared with the reference as if only memory changed."
            )
    sheet.recommendation = _recommend(sheet)
    sheet.expected_result = expected_result(nb, vid)
    if nb.variant(vid).set:
        sheet.notes.append("variant overrides: " + ", ".join(f"{k}={v}" for k, v in nb.variant(vid).set.items()))
    return sheet


def _count(pilot: RunFiles, phase: str, key: str) -> int | None:
    """A whole number among a gate's inputs (a probe's microbatch, its microbatches per update), None if absent."""
    g = pilot.gate(phase)
    n = number((g.get("inputs") or {}).get(key)) if g else None
    return int(n) if n is not None else None


def _optimizer_state(pilot: RunFiles) -> str:
    """The optimizer state the first step allocated, counted over the parameters that train (an adapter's only)."""
    gate = pilot.gate("update_first") or {}
    st = gate.get("optimizer_state")
    if not isinstance(st, dict) or not isinstance(st.get("bytes"), (int, float)):
        return ""
    train, total = st.get("trainable_values") or 0, st.get("parameter_values") or 0
    out = (
        f"{st['bytes'] / MIB:,.2f} MiB after the first step ({st.get('tensors')} tensors for "
        f"{st.get('parameters_with_state')} parameters), for the {train:,} trainable parameter values only"
    )
    if st.get("adapter"):
        out += f": {st['adapter']}, and the frozen base ({total - train:,} values) holds none"
    elif total and train < total:
        out += f" ({total - train:,} frozen values hold none)"
    return out + "; already inside the measured peaks"


def _recommend(s: Sheet) -> str:
    if not s.measured_gpu:
        return (
            f"none: no GPU memory was measured (the {s.noun} ran on "
            f"{s.device}). Run the {s.noun} on a GPU machine; the sheet recommends a size only from "
            "its figures."
        )
    best = s.smallest_fit
    per = f" per GPU x {s.gpus} GPUs ({s.strategy})" if s.gpus > 1 else ""
    if best is None:
        return (
            f"none of {', '.join(f'{f.size_gb} GB' for f in s.fits)} fits{per}: "
            f"{_mib(s.need_mib)} needed. Lower the microbatch and raise accumulation, enable "
            f"activation checkpointing or bf16, or shard the model (FSDP), then pilot again."
        )
    if not s.stack_passed:
        return (
            f"{best.size_gb} GB would fit{per}, but no GPU stack check passed in this pilot "
            f"({s.stack_detail}); a machine is recommended only once its stack passes."
        )
    return (
        f"{best.size_gb} GB{per}: the smallest common size that holds {_mib(s.need_mib)}; stack passed on {s.gpu_name}."
    )


def render(s: Sheet) -> list[str]:
    """The sheet as Markdown lines (readable as plain text in a terminal too)."""
    out = [f"Selection sheet: campaign {s.campaign}, variant {s.variant}, from {s.noun} {s.run_id} ({s.run_dir})", ""]
    if s.truncation:
        out += [f"**{s.truncation}**", ""]
    out.append(f"- stack: {s.stack_detail}")
    if s.measured_gpu:
        rank = f", rank {s.peak_rank}" if s.peak_rank is not None else ""
        out.append(
            f"- peak per GPU: {_mib(s.peak_reserved_mib)} torch peak reserved in phase "
            f"**{s.peak_phase}**{rank} with inputs {inputs_text(s.peak_inputs)}"
        )
        out.append(f"- CUDA context: {_mib(s.context_mib)}, {s.context_source}")
        if s.others_mib:
            out.append(
                f"- other processes held {_mib(s.others_mib)} on that GPU while the pilot ran: kept out of "
                "this size, which is the run's own (free them on the rented box, or choose a GPU with that "
                "much more)"
            )
        out.append(f"- headroom: {s.headroom:.0%} of peak + context (notebook [pilot] headroom)")
        out.append(
            f"- memory needed per GPU: **{_mib(s.need_mib)}** = ({s.peak_reserved_mib:,.0f} + "
            f"{s.context_mib:,.0f}) x {1 + s.headroom:.2f}"
        )
    else:
        out.append(
            f"- peak per GPU: **GPU memory not measured**: the {s.noun} ran on {s.device}, so there is "
            "no torch or NVML figure; no GPU size is derived from CPU memory"
        )
        if s.rss_peak_mib is not None:
            out.append(
                f"- process RSS peaked at {_mib(s.rss_peak_mib)} in phase **{s.rss_phase}** with "
                f"inputs {inputs_text(s.rss_inputs)} (host memory, not GPU memory)"
            )
    if s.optimizer_state:
        out.append(f"- optimizer state: {s.optimizer_state}")
    out.append(f"- maximum dimensions tested: {s.max_dimensions}")
    out.append(
        f"- precision {s.precision}, microbatch {s.microbatch}, accumulation {s.accumulation}, "
        f"strategy {s.strategy}" + (f" on {s.gpus} GPUs" if s.gpus > 1 else "")
    )
    if s.measured_gpu:
        fits = [f"{f.size_gb} GB" for f in s.fits if f.fits]
        nofit = [f"{f.size_gb} GB" for f in s.fits if not f.fits]
        out.append(
            f"- fits: {', '.join(fits) or 'none'}; does not fit: {', '.join(nofit) or 'none'} "
            "(capacity taken as the nominal size in decimal GB, e.g. 24 GB = 22,888 MiB)"
        )
        if s.gpu_total_mib:
            out.append(f"- measured on {s.gpu_name} with {s.gpu_total_mib:,.0f} MiB")
    else:
        out.append(f"- fits: unknown for {', '.join(f'{f.size_gb} GB' for f in s.fits)}: GPU memory not measured")
    if s.estimate:
        out.append(f"- {s.estimate}")
    out.append(f"- recommended: {s.recommendation}")
    out.append(f"- expected result: {s.expected_result}")
    out += [f"- {n}" for n in s.notes]
    return out


def selection_of(s: Sheet) -> nbm.Selection:
    """The notebook's [selection] as this sheet fills it."""
    best = s.smallest_fit
    if not s.measured_gpu:
        gpu = f"not chosen: GPU memory not measured ({s.noun} {s.run_id} ran on {s.device})"
    elif best is None:
        gpu = f"none fits: {s.need_mib:,.0f} MiB per GPU needed ({s.noun} {s.run_id})"
    elif not s.stack_passed:
        gpu = f"{best.size_gb} GB would fit; not recommended until a GPU stack check passes"
    else:
        gpu = f"{best.size_gb} GB" + (f" x {s.gpus}" if s.gpus > 1 else "")
    notes = f"from {s.noun} {s.run_id}, variant {s.variant}; " + (
        f"peak {s.peak_reserved_mib:,.0f} MiB in {s.peak_phase}, context {s.context_mib:,.0f} MiB "
        f"({'measured' if s.context_source.startswith('measured') else 'assumed'}), headroom {s.headroom:.0%}"
        if s.measured_gpu
        else f"CPU {s.noun}: RSS {_mib(s.rss_peak_mib)} in {s.rss_phase}; GPU not measured"
    )
    if s.truncation:
        notes = s.truncation + " " + notes
    if s.estimate:
        notes += "; " + s.estimate
    return nbm.Selection(
        memory_per_gpu_mib=round(s.need_mib, 1) if s.need_mib is not None else None,
        max_dimensions=s.max_dimensions,
        precision=s.precision,
        microbatch=s.microbatch,
        accumulation=s.accumulation,
        strategy=s.strategy,
        gpu=gpu,
        expected_result=s.expected_result,
        notes=notes,
    )
