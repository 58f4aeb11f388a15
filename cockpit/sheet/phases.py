"""The pilot's phases as the sheet reads them: one row per gate and rank, and what each gate says of
the sizing (the largest batch tried, truncation, the strategy, other processes' memory). No torch."""

from __future__ import annotations

from typing import TypedDict

from .. import notebook as nbm
from ..compare.quality import mapping, number
from ..notebook.settings import Settings
from ..runs import RunFiles
from ..schema import JSON, Event, JSONObject


class PhaseRow(TypedDict):
    """One gate (and rank) of a pilot as the sheet, the report's memory chart and the plan read it; memory in
    bytes, None where the gate did not measure it."""

    phase: str
    rank: int | None
    inputs: JSONObject
    peak_reserved: float | None
    peak_allocated: float | None
    reserved: float | None
    nvml_used: int | None
    rss_peak: float | None
    duration_s: float | None
    verdict: str | None


def peaks_mib(rows: list[PhaseRow]) -> tuple[float | None, float | None]:
    """The largest torch peak allocated and peak reserved over a pilot's rows, in MiB (None: not measured), as
    a saved ``cockpit estimate`` is set beside them."""
    alloc = [a for r in rows if (a := r["peak_allocated"]) is not None]
    resv = [a for r in rows if (a := r["peak_reserved"]) is not None]
    return (max(alloc) / 2**20 if alloc else None), (max(resv) / 2**20 if resv else None)


def inputs_text(inputs: JSONObject) -> str:
    parts = []
    for k, v in inputs.items():
        if k == "ids":
            continue
        if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
            v = f"{min(v)}..{max(v)}" if min(v) != max(v) else f"{v[0]} (x{len(v)})"
        elif isinstance(v, list):
            v = f"[{len(v)} items]"
        parts.append(f"{k}={v}")
    return ", ".join(parts) or "no inputs recorded"


def _used(gpu: JSON) -> int | None:
    used = number(mapping(gpu).get("used"))
    return int(used) if used is not None else None


def _nvml_for(gate: Event, device: str) -> int | None:
    """NVML used on the GPU this gate's process ran on, when it can be told."""
    nv = mapping(gate.get("mem")).get("nvml")
    if not nv or not isinstance(nv, list):
        return None
    if len(nv) == 1:
        return _used(nv[0])
    dev = str(gate.get("device") or device or "")
    idx = int(dev.split(":")[1]) if ":" in dev and dev.split(":")[1].isdigit() else None
    rank = gate.get("rank")
    if idx is None and rank is not None:
        idx = int(rank)
    match = [g for g in nv if mapping(g).get("index") == idx]
    return _used(match[0]) if match else None


def phase_rows(run: RunFiles) -> list[PhaseRow]:
    """One row per gate (and rank): the figures the sheet and the memory chart use."""
    device = str(run.stack.get("device") or "")
    out: list[PhaseRow] = []
    for g in run.gates:
        mem = mapping(g.get("mem"))
        t = mapping(mem.get("torch"))
        rss_peak = mem.get("rss_peak")
        out.append(
            {
                "phase": g.get("phase") or "?",
                "rank": g.get("rank"),
                "inputs": dict(g.get("inputs") or {}),
                "peak_reserved": number(t.get("peak_reserved")),
                "peak_allocated": number(t.get("peak_allocated")),
                "reserved": number(t.get("reserved")),
                "nvml_used": _nvml_for(g, device),
                "rss_peak": number(rss_peak if rss_peak is not None else mem.get("rss")),
                "duration_s": g.get("duration_s"),
                "verdict": g.get("verdict"),
            }
        )
    return out


def truncated_examples(run: RunFiles | None) -> int | None:
    """Target tokens lost to truncation, as the data gate recorded it (None: not recorded)."""
    if run is None:
        return None
    g = run.gate("data")
    if not g:
        return None
    t = g.get("truncation")  # schema.Truncation, among the gate's own figures
    lost = t.get("lose_target_tokens") if isinstance(t, dict) else None
    return int(lost) if isinstance(lost, (int, float)) and not isinstance(lost, bool) else None


def strategy_of(nb: nbm.Notebook, s: Settings) -> tuple[str, int]:
    replicas, mp = s.data_replicas, s.model_parallel
    gpus = replicas * mp
    if nb.selection.strategy in nbm.STRATEGIES and (gpus > 1) == (nb.selection.strategy != "one GPU"):
        return nb.selection.strategy, gpus
    if gpus == 1:
        return "one GPU", 1
    return ("FSDP" if mp > 1 else "DDP"), gpus


def _inputs(run: RunFiles, phase: str) -> JSONObject:
    g = run.gate(phase)
    return (g.get("inputs") if g else None) or {}


def dimensions_of_probe(run: RunFiles) -> str:
    """What a probe measured: the script's own batches, not the worst case the campaign can produce."""
    i = _inputs(run, "forward")
    shapes = ", ".join(
        f"{k} {'x'.join(str(d) for d in v)}" for k, v in mapping(i.get("shapes")).items() if v and isinstance(v, list)
    )
    return (
        f"the script's own batches as it ran them ({shapes or 'shapes not recorded'}): a probe does not run "
        "the longest batch the data can produce, so a longer one may need more"
    )


def dimensions_of_pilot(run: RunFiles) -> str:
    parts = []
    if run.gate("worst_case"):
        i = _inputs(run, "worst_case")
        raw = i.get("lengths")
        lens = [n for x in raw if (n := number(x)) is not None] if isinstance(raw, list) else []
        s = f"training update on the longest batch: microbatch {i.get('microbatch', '?')}"
        if lens:
            s += f" x length {max(lens)}"
        if i.get("cropped_to"):
            s += f" (max_length {i['cropped_to']})"
        if i.get("accumulation"):
            s += f", accumulation {i['accumulation']}"
        parts.append(s)
    else:
        parts.append("the worst-case update was not run: the largest batch is not measured")
    if run.gate("validation"):
        i = _inputs(run, "validation")
        s = f"validation: eval microbatch {i.get('eval_microbatch', '?')}"
        if i.get("longest") is not None:
            s += f", longest example {i['longest']}"
        parts.append(s)
    return "; ".join(parts)


def others_on_gpu(run: RunFiles, phase: str, device: str) -> int:
    """Bytes other processes held on the run's GPU at the end of a phase (the pilot records them per phase)."""
    g = run.gate(phase)
    held = mapping(mapping(g.get("machine") if g else None).get("gpu_others"))
    index = device.split(":")[1] if ":" in device else "0"
    n = number(held.get(index))
    return int(n or 0)
