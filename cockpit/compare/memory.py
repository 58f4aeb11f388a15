"""Memory and time per phase from each variant's latest passed pilot, and the flags of a changed question."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from .. import arithmetic, runs
from .. import events as ev
from .. import notebook as nbm
from ..schema import JSONObject
from .quality import MEMORY_KNOBS, Group, differences_text, mapping, number, whole


@dataclass
class PhaseMem:
    phase: str
    peak: int | None  # bytes: torch peak allocated on a GPU, else the process's peak RSS
    peak_reserved: int | None
    counter: str
    duration_s: float | None


@dataclass
class PilotMem:
    variant: str
    run: str | None
    phases: dict[str, PhaseMem]
    peak: int | None
    counter: str
    step_time_s: float | None
    max_length: int | None
    truncation: JSONObject | None  # the data gate's schema.Truncation, or one per split
    params_note: str = ""
    step_min_s: float | None = None  # the spread of the timed updates: a ratio inside it is no difference
    step_max_s: float | None = None
    step_n: int = 0
    busy: str = ""  # the updates were timed while other processes kept the CPUs busy
    kind: str = "pilot"  # "probe": measured on the user's own script, with its own settings
    # No passed pilot of its own, but another variant's vouches for it (runs.pilot_for: they differ only in
    # runs.SHARED_SCALARS): that pilot's id and variant. Its figures are that variant's column.
    shared_run: str | None = None
    shared_variant: str = ""


class PhaseMemRow(TypedDict):
    """A :class:`PhaseMem` as ``cockpit compare`` hands it on."""

    phase: str
    peak: int | None
    peak_reserved: int | None
    counter: str
    duration_s: float | None


class PilotMemRow(TypedDict):
    """A :class:`PilotMem` as ``cockpit compare`` hands it on (its ``memory``): the dataclass's fields, in its
    order."""

    variant: str
    run: str | None
    phases: dict[str, PhaseMemRow]
    peak: int | None
    counter: str
    step_time_s: float | None
    max_length: int | None
    truncation: JSONObject | None
    params_note: str
    step_min_s: float | None
    step_max_s: float | None
    step_n: int
    busy: str
    kind: str
    shared_run: str | None
    shared_variant: str


class Flag(TypedDict):
    """What makes a variant answer another question than the reference, and how."""

    flag: str
    detail: str


def pilot_mem_row(m: PilotMem) -> PilotMemRow:
    return {
        "variant": m.variant,
        "run": m.run,
        "phases": {
            k: {
                "phase": p.phase,
                "peak": p.peak,
                "peak_reserved": p.peak_reserved,
                "counter": p.counter,
                "duration_s": p.duration_s,
            }
            for k, p in m.phases.items()
        },
        "peak": m.peak,
        "counter": m.counter,
        "step_time_s": m.step_time_s,
        "max_length": m.max_length,
        "truncation": copy.deepcopy(m.truncation),
        "params_note": m.params_note,
        "step_min_s": m.step_min_s,
        "step_max_s": m.step_max_s,
        "step_n": m.step_n,
        "busy": m.busy,
        "kind": m.kind,
        "shared_run": m.shared_run,
        "shared_variant": m.shared_variant,
    }


def unmeasured_lines(mem: Mapping[str, PilotMemRow], shown: list[str]) -> list[str]:
    """What compare says of the variants left out of its memory table: which share another variant's passed
    pilot (by runs.pilot_for, the rule ``cockpit pilot --all`` and the series guard use), and which have none."""
    left = [v for v in mem if v not in shown]
    shared: dict[tuple[str, str], list[str]] = {}
    for v in left:
        if (run := mem[v].get("shared_run")) is not None:
            shared.setdefault((str(mem[v].get("shared_variant") or "?"), run), []).append(v)
    out = [
        f"{', '.join(vs)}: {'share' if len(vs) > 1 else 'shares'} {owner}'s passed pilot {run} (differing only in "
        f"{', '.join(sorted(runs.SHARED_SCALARS))}, which a pilot does not measure apart)"
        for (owner, run), vs in shared.items()
    ]
    none = [v for v in left if mem[v].get("shared_run") is None]
    if none:
        out.append(f"no passed pilot (not in the table): {', '.join(none)}")
    return out


def _object(x: object) -> JSONObject | None:
    """A JSON object, else None (an empty object stays an empty object)."""
    return x if isinstance(x, Mapping) else None


def _data_gate(all_runs: list[runs.RunFiles], vid: str) -> tuple[str, ev.Event] | None:
    """The data gate of the variant's latest pilot that reached it, passed or not: the truncation
    count is a fact about the data whatever the pilot's verdict (a truncating variant may warn or fail)."""
    for r in reversed(all_runs):
        if r.kind != "pilot" or r.variant != vid:
            continue
        gate = r.gate("data")
        if gate is not None:
            return r.id, gate
    return None


def pilot_memory(nb: nbm.Notebook, vid: str, all_runs: list[runs.RunFiles] | None = None) -> PilotMem:
    all_runs = all_runs if all_runs is not None else runs.campaign_runs(nb.directory)
    pilot = runs.latest_measured(all_runs, vid)
    params = {k: v for k, v in nb.params(vid).items() if v is not None}
    data = _data_gate(all_runs, vid)
    if pilot is None:
        shared, _ = runs.pilot_for(nb, all_runs, vid)  # the one rule `pilot --all` and the series guard ask
        ml = params.get("max_length")
        trunc = data[1].get("truncation") if data else None
        ml = (data[1].get("inputs") or {}).get("max_length", ml) if data else ml
        return PilotMem(
            vid,
            None,
            {},
            None,
            "",
            None,
            int(ml) if isinstance(ml, int) else None,
            _object(trunc),
            shared_run=shared.id if shared is not None else None,
            shared_variant=shared.variant if shared is not None else "",
        )
    evs = pilot.events
    phases: dict[str, PhaseMem] = {}
    max_length: int | None = None
    truncation: JSONObject | None = None
    for g in ev.gates(evs):
        mem = mapping(g.get("mem"))
        peak, counter = runs.mem_peak(mem)
        reserved = whole(mapping(mem.get("torch")).get("peak_reserved"))
        phase = str(g.get("phase"))
        phases[phase] = PhaseMem(phase, peak, reserved, counter, g.get("duration_s"))
        if phase == "data":
            ml = (g.get("inputs") or {}).get("max_length")
            max_length = ml if isinstance(ml, int) and not isinstance(ml, bool) else None
            truncation = _object(g.get("truncation"))
    timing = mapping(pilot.step_time())
    step_time = number(timing.get("median"))
    sizing = [p for p in phases.values() if p.phase not in runs.CHECK_PHASES] or list(phases.values())
    peaks = [p.peak for p in sizing if p.peak is not None]  # Cockpit's own checks never size a variant
    counter = next((p.counter for p in phases.values()), "")
    if max_length is None and isinstance(params.get("max_length"), int):
        max_length = int(params["max_length"])
    frozen = pilot.frozen.get("params", {})
    note = differences_text(frozen, params)
    if pilot.probed:
        command = str((pilot.run_start.get("probe") or {}).get("command") or "the script")
        note = f"probe {pilot.id} measured `{command}` with its own settings, not the notebook's"
    return PilotMem(
        vid,
        pilot.id,
        phases,
        max(peaks) if peaks else None,
        counter,
        step_time,
        max_length,
        truncation,
        (note if pilot.probed else f"pilot {pilot.id} ran with {note}, not the notebook's current settings")
        if note
        else "",
        number(timing.get("min")),
        number(timing.get("max")),
        whole(timing.get("n")) or 0,
        str((pilot.gate("update_second") or {}).get("busy") or ""),
        pilot.kind,
    )


def _trunc_counts(tr: JSONObject) -> list[tuple[str, JSONObject]]:
    """The data gate's truncation record: one dict, or one per split."""
    if "lose_target_tokens" in tr or "examples" in tr:
        return [("", tr)]
    return [(k, v) for k, v in tr.items() if isinstance(v, Mapping)]


def flags(nb: nbm.Notebook, vid: str, mem: dict[str, PilotMem], groups: list[Group]) -> list[Flag]:
    """What makes a variant answer a different question than the reference, or leaves it unknown."""
    out: list[Flag] = []
    ref = nb.reference
    c = nb.campaign
    rp = {k: v for k, v in nb.params(ref.id).items() if v is not None}
    vp = {k: v for k, v in nb.params(vid).items() if v is not None}
    if vid != ref.id:
        try:
            r_plan, v_plan = arithmetic.plan_from(rp), arithmetic.plan_from(vp)
            if r_plan.examples_per_update != v_plan.examples_per_update or r_plan.drop_last != v_plan.drop_last:
                try:
                    text = arithmetic.what_changes(c.held_constant, r_plan, v_plan, arithmetic.budget_from(r_plan, rp))
                except ValueError as exc:
                    text = f"effective batch {r_plan.examples_per_update} -> {v_plan.examples_per_update} ({exc})"
                out.append({"flag": "effective batch changed", "detail": text})
        except (ValueError, KeyError) as exc:
            out.append({"flag": "effective batch unknown", "detail": str(exc)})
        v = nb.variant(vid)
        if v.kind == "memory":
            other = {k: val for k, val in v.set.items() if k not in MEMORY_KNOBS and rp.get(k) != val}
            if other:
                out.append(
                    {
                        "flag": "not only memory settings",
                        "detail": "also changes " + ", ".join(f"{k}={val}" for k, val in other.items()),
                    }
                )
    m, r = mem.get(vid), mem.get(ref.id)
    ml, rml = (m.max_length if m else None), (r.max_length if r else None)
    tr = m.truncation if m else None
    if tr is not None:
        for split, t in _trunc_counts(tr):
            lose = whole(t.get("lose_target_tokens")) or 0
            examples = whole(t.get("examples")) or 0
            where = f" ({split})" if split else ""
            text = (
                f"max_length {t.get('max_length', ml)}: {lose} of {examples} examples{where} "
                f"({lose / max(examples, 1):.0%}) lose target tokens, "
                f"{whole(t.get('no_target_left')) or 0} have no target left"
            )
            if (longer := whole(t.get("longer_than_max"))) is not None:
                text += f" ({longer} are longer than max_length)"
            if lose and (vid != ref.id and (rml is None or ml is None or ml < rml)):
                out.append({"flag": "shorter max_length truncates targets", "detail": text})
            elif lose:
                out.append({"flag": "targets truncated", "detail": text})
    elif vid != ref.id and ml is not None and rml is not None and ml < rml:
        out.append(
            {
                "flag": "shorter max_length: truncation not measured",
                "detail": f"max_length {rml} -> {ml}; the pilot's data gate recorded no truncation count"
                + ("" if m and m.run else " (no passed pilot for this variant)"),
            }
        )
    own = [g for g in groups if g.variant == vid and g.tag == "" and g.stats.n]
    if nb.variant(vid).kind == "memory" and not own:
        out.append(
            {
                "flag": "quality not measured",
                "detail": f"no training run of {vid} completed at the notebook's settings: a memory variant (precision, "
                "microbatch, checkpointing, max_length) can change the result too; "
                f"`cockpit series {nb.directory} --variants {vid} --seeds 0` measures it (the plan budgets one run)",
            }
        )
    if c.quality_target is not None:
        own = [g for g in groups if g.variant == vid and g.tag == ""]
        if own and own[0].target_reached is False:
            out.append(
                {
                    "flag": "quality target not reached",
                    "detail": f"mean {c.quality_metric} {own[0].stats.mean:.4g}; {own[0].target}",
                }
            )
    return out
