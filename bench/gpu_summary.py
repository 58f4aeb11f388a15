"""The short summary bench/gpu_check.py prints and saves as summary.txt, from its result (every figure is in the
JSON; this is what a reader looks at first)."""

from __future__ import annotations

from typing import Any


def n(v: Any, unit: str = "") -> str:
    """A figure for the summary: '-' where it was not measured (absent on a CPU), thousands separated."""
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) >= 100:
        return f"{v:,.0f}{unit}"
    if isinstance(v, float):
        return f"{round(v, 3)}{unit}"
    return f"{v}{unit}"


def findings(section: str, gates: list[dict[str, Any]]) -> list[str]:
    """The checks of a section's gates that did not hold (failures, then warnings; not-applicable ones are in the
    JSON): what a GPU shows that the CPU rehearsal never did."""
    out = []
    for warn in (False, True):
        for g in gates:
            for ch in g.get("checks") or []:
                if not ch.get("ok") and bool(ch.get("warn")) == warn and not ch.get("na"):
                    out.append(
                        f"  {section} {'warn' if warn else 'FAIL'} {g['phase']}: {ch['name']}: {ch['detail'][:160]}"
                    )
    return out


def summarise(res: dict[str, Any]) -> list[str]:
    """The short summary printed at the end (every figure is in the JSON)."""
    s = res["sections"]
    m = s.get("machine") or {}
    where = (
        "REHEARSAL on CPU (toy sizes, injected OOMs; GPU counters absent)"
        if res["rehearsal"]
        else f"on {m.get('device')}"
    )
    lines = [f"gpu check {where}"]
    for name, r in s.items():
        if r.get("skipped"):
            lines.append(f"{name:<11} skipped: {r['skipped']}")
        elif r.get("error"):
            lines.append(f"{name:<11} ERROR {str(r['error']).strip().splitlines()[-1][:150]}")
    if m.get("torch"):
        lines.append(
            f"machine     torch {m.get('torch')} CUDA {m.get('cuda')}; CUDA context {n(m.get('cuda_context_mib'), ' MiB')} "
            f"beyond torch, {n(m.get('beyond_torch_after_a_step_mib'), ' MiB')} after a bf16 step's kernels; "
            f"init {n(m.get('cuda_init_s'), ' s')}; us per call {m.get('us_per_call')}"
        )
    p = s.get("gpt2_pilot") or {}
    if p.get("gates"):
        lines.append(
            f"gpt2_pilot  {p.get('status')} in {n(p.get('wall_s'), ' s')}: peak allocated {n(p.get('peak_allocated_mib'))}, "
            f"reserved {n(p.get('peak_reserved_mib'))}, NVML {n(p.get('nvml_peak_mib'))} MiB; "
            f"worst_case {n(p.get('worst_case_peak_allocated_mib'))} MiB allocated"
        )
        heads = ("alloc", "reserved", "pk alloc", "pk res", "NVML", "NVML-res")
        lines.append(f"  {'phase':<14}{'verdict':<8}" + "".join(f"{h:>9}" for h in heads) + f"{'s':>7}")
        for x in p["gates"]:
            keys = ("allocated_mib", "reserved_mib", "peak_allocated_mib", "peak_reserved_mib")
            cells = [x.get(k) for k in keys] + [
                (x.get("nvml_used_mib") or [None])[0],
                x.get("nvml_beyond_reserved_mib"),
            ]
            row = "".join(f"{'-' if v is None else f'{v:,.0f}':>9}" for v in cells)
            lines.append(f"  {x['phase']:<14}{x['verdict']:<8}{row}{x['duration_s']:>7.1f}")
    for name in ("gpt2_pilot", "demo_pilot", "probe", "series"):
        lines += findings(name, (s.get(name) or {}).get("gates") or [])
    se = s.get("series") or {}
    if se.get("vs_pilot"):
        v = se["vs_pilot"]
        lines.append(
            f"series      {se.get('updates')} updates, evaluations at {se.get('evals')}: peak allocated "
            f"{n(se.get('peak_allocated_mib'))}, reserved {n(se.get('peak_reserved_mib'))}, NVML {n(se.get('nvml_peak_mib'))} "
            f"MiB; {n(se.get('ms_per_update_median'))} ms per update"
        )
        lines.append(
            f"  pilot / series (target 0.98..1.02): worst_case {n(v['worst_case_allocated'])}, pilot peak allocated "
            f"{n(v['pilot_peak_allocated'])}, reserved {n(v['pilot_peak_reserved'])}, NVML {n(v['pilot_nvml_peak'])}; "
            f"forward gate (with its checks) {n(v['forward_gate_allocated'])}; Cockpit's check phases "
            f"{n(v['cockpit_checks_allocated'])}"
        )
    for name, o in (s.get("oom") or {}).items():
        if isinstance(o, dict) and o.get("skipped"):
            lines.append(f"oom {name:<11} skipped: {o['skipped']}")
        elif isinstance(o, dict) and "expected_phase" in o:
            ok = "ok" if o.get("recorded_phase") == o["expected_phase"] and o.get("status") == "oom" else "MISMATCH"
            lines.append(
                f"oom {name:<11} {ok}: {o.get('status')} in {o.get('recorded_phase')} (expected {o['expected_phase']})"
                f"{' [injected]' if o.get('injected') else ''}; inputs {o.get('inputs')}"
            )
            lines.append(f"  remedy: {(o.get('remedy') or '')[:200]}")
    for v in ("fp16", "ckpt", "mb4x2"):
        x = (s.get("variants") or {}).get(v)
        if x:
            why = "" if x.get("status") == "passed" else f" ({str(x.get('stop_reason'))[:80]})"
            lines.append(
                f"variant {v:<7} {x.get('status')}{why}: peak allocated {n(x.get('peak_allocated_mib'))} MiB = "
                f"{n(x.get('vs_bf16_allocated'))}x bf16's; reserved {n(x.get('vs_bf16_reserved'))}x"
            )
    o = s.get("overhead") or {}
    sm = o.get("sampler") or {}
    if sm.get("achieved_hz") is not None:
        lines.append(
            f"sampler     {sm['achieved_hz']} Hz of {sm.get('nominal_hz')}; {n(sm.get('cpu_share_of_one_core'))} of a core; "
            f"{n(sm.get('cpu_ms_per_sample'))} ms CPU per sample"
        )
    for k in ("demo_width", "gpt2_width"):
        if (o.get(k) or {}).get("ratio") is not None:
            lines.append(f"overhead    {k}: metered / bare {o[k]['ratio']} (target at most 1.02 on a GPU)")
    d = s.get("demo_pilot") or {}
    if d.get("status"):
        lines.append(
            f"demo_pilot  {d.get('status')} in {n(d.get('wall_s'), ' s')}: peak allocated {n(d.get('peak_allocated_mib'))} MiB, "
            f"NVML {n(d.get('nvml_peak_mib'))} MiB"
        )
    pr = s.get("probe") or {}
    if pr.get("status"):
        lines.append(
            f"probe       {pr.get('status')}: {str(pr.get('stop_reason'))[:120]}; peak {n(pr.get('peak_mib'), ' MiB')} "
            f"({pr.get('peak_counter')})"
        )
    e = s.get("estimate") or {}
    if e.get("phases"):
        lines.append(
            f"estimate    peak {n(e.get('predicted_peak_allocated_mib'), ' MiB')} in {e.get('predicted_peak_phase')}: "
            f"{n(e.get('vs_pilot_peak'))}x the pilot's measured peak, {n(e.get('vs_series_peak'))}x the series'"
        )
    t = s.get("tui") or {}
    if t.get("shown"):
        lines.append(f"tui         shown {t['shown']} (the screens' text in {t.get('file')})")
    lines.append(f"total       {n(res.get('seconds'), ' s')}")
    return lines
