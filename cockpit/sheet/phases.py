"""The pilot's phases as the sheet reads them: one row per gate and rank, and what each gate says of
the sizing (the largest batch tried, truncation, the strategy, other processes' memory). No torch."""

from __future__ import annotations

from typing import Any

from .. import notebook as nbm
from ..notebook.settings import Settings
from ..runs import RunFiles


def inputs_text(inputs: dict[str, Any]) -> str:
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


def _nvml_for(gate: dict[str, Any], device: str) -> int | None:
    """NVML used on the GPU this gate's process ran on, when it can be told."""
    nv = (gate.get("mem") or {}).get("nvml")
    if not nv:
        return None
    if len(nv) == 1:
        return int(nv[0]["used"])
    dev = str(gate.get("device") or device or "")
    idx = int(dev.split(":")[1]) if ":" in dev and dev.split(":")[1].isdigit() else None
    if idx is None and gate.get("rank") is not None:
        idx = int(gate["rank"])
    match = [g for g in nv if g.get("index") == idx]
    return int(match[0]["used"]) if match else None


def phase_rows(run: RunFiles) -> list[dict[str, Any]]:
    """One row per gate (and rank): the figures the sheet and the memory chart use."""
    device = str(run.stack.get("device") or "")
    out = []
    for g in run.gates:
        mem = g.get("mem") or {}
        t = mem.get("torch")
        out.append(
            {
                "phase": g.get("phase", "?"),
                "rank": g.get("rank"),
                "inputs": dict(g.get("inputs") or {}),
                "peak_reserved": t.get("peak_reserved") if t else None,
                "peak_allocated": t.get("peak_allocated") if t else None,
                "reserved": t.get("reserved") if t else None,
                "nvml_used": _nvml_for(g, device),
                "rss_peak": mem.get("rss_peak") if mem.get("rss_peak") is not None else mem.get("rss"),
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


def strategy_of(nb: nbm.Notebook, params: dict[str, Any]) -> tuple[str, int]:
    s = Settings(params)
    replicas, mp = s.data_replicas, s.model_parallel
    gpus = replicas * mp
    if nb.selection.strategy in nbm.STRATEGIES and (gpus > 1) == (nb.selection.strategy != "one GPU"):
        return nb.selection.strategy, gpus
    if gpus == 1:
        return "one GPU", 1
    return ("FSDP" if mp > 1 else "DDP"), gpus


def dimensions_of_probe(run: RunFiles) -> str:
    """What a probe measured: the script's own batches, not the worst case the campaign can produce."""
    i = (run.gate("forward") or {}).get("inputs") or {}
    shapes = ", ".join(f"{k} {'x'.join(str(d) for d in v)}" for k, v in (i.get("shapes") or {}).items() if v)
    return (
        f"the script's own batches as it ran them ({shapes or 'shapes not recorded'}): a probe does not run "
        "the longest batch the data can produce, so a longer one may need more"
    )


def dimensions_of_pilot(run: RunFiles) -> str:
    wc = run.gate("worst_case")
    parts = []
    if wc:
        i = wc.get("inputs") or {}
        lens = i.get("lengths") or []
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
    val = run.gate("validation")
    if val:
        i = val.get("inputs") or {}
        s = f"validation: eval microbatch {i.get('eval_microbatch', '?')}"
        if i.get("longest") is not None:
            s += f", longest example {i['longest']}"
        parts.append(s)
    return "; ".join(parts)


def others_on_gpu(run: RunFiles, phase: str, device: str) -> int:
    """Bytes other processes held on the run's GPU at the end of a phase (the pilot records them per phase)."""
    g = run.gate(phase) or {}
    held = (g.get("machine") or {}).get("gpu_others") or {}
    index = device.split(":")[1] if ":" in device else "0"
    return int(held.get(index) or 0)
