"""The times a rental plan is built from: per update, per validation, per save, per export. No torch.

Each time comes from a measurement and says which: a series run's ``metrics.json``
(``step_time_s`` per update, ``eval_time_s`` per validation, ``save_time_s`` per save) when
one finished, else the variant's pilot (the second update, optimizer state resident; the
validation, save and export phases), with the number of steps it is extrapolated from. The
pilot's save and export phases also give the bytes a checkpoint and an export take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import sheet as sh


@dataclass
class Timing:
    variant: str
    step_s: float | None = None
    step_source: str = ""
    eval_s: float | None = None
    eval_source: str = ""
    save_s: float | None = None
    save_source: str = ""
    export_s: float | None = None
    export_source: str = ""
    device: str = ""
    worst_step_s: float | None = None
    step_spread: tuple[float, float] | None = None  # min and max of the pilot's timed updates
    busy: str = ""  # the pilot timed its updates while other processes kept the CPUs busy
    checkpoint_bytes: int | None = None  # the pilot's save phase: one checkpoint as the series writes it
    export_bytes: int | None = None  # the pilot's export phase: the artifact a completed run leaves
    bytes_source: str = ""
    # A probed script validates on its own schedule, not at [validation] every_updates: the steps apart its
    # evaluations came in the probe (None: not a probe, or it watched fewer than needed to tell)
    eval_every: int | None = None
    eval_every_source: str = ""
    borrowed_from: str = ""
    why_not: str = ""

    @property
    def measured(self) -> bool:
        return self.step_s is not None


def _step_duration(run: sh.RunFiles, phase: str) -> float | None:
    for e in run.events:
        d = e.get("duration_s")
        if e.get("kind") == "step" and e.get("phase") == phase and isinstance(d, (int, float)):
            return float(d)
    return _gate_s(run, phase)


def _gate_s(run: sh.RunFiles, phase: str) -> float | None:
    g = run.gate(phase)
    d = g.get("duration_s") if g else None
    return float(d) if isinstance(d, (int, float)) else None


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def measure(all_runs: list[sh.RunFiles], variant: str) -> Timing:
    """The variant's own measured times: series runs first, else its latest passed pilot (or probe)."""
    t = Timing(variant)
    pilot = sh.latest_measured(all_runs, variant)
    series = [r for r in sh.series_runs(all_runs, variant) if _num((r.metrics or {}).get("step_time_s"))]
    if series:
        slow = max(series, key=lambda r: _num((r.metrics or {}).get("step_time_s")) or 0.0)
        t.step_s = _num((slow.metrics or {}).get("step_time_s"))
        steps = [int((r.metrics or {}).get("updates") or 0) for r in series]
        t.step_source = (
            f"series: slowest of {len(series)} run{'s' if len(series) != 1 else ''} "
            f"({', '.join(r.id for r in series)}), each timed over its updates "
            f"({', '.join(str(s) for s in steps)})"
        )
        t.device = str(slow.stack.get("device") or "") or "the series machine"
        evals = [(r, v) for r in series if (v := _num((r.metrics or {}).get("eval_time_s"))) is not None]
        if evals:
            r, v = max(evals, key=lambda x: x[1])
            t.eval_s, t.eval_source = v, f"series run {r.id}: time per validation"
        saves = [(r, v) for r in series if (v := _num((r.metrics or {}).get("save_time_s"))) is not None]
        if saves:
            r, v = max(saves, key=lambda x: x[1])
            t.save_s, t.save_source = v, f"series run {r.id}: time per save"
    if pilot is not None:
        if t.step_s is None:
            timing = pilot.step_time()
            if timing is not None:
                t.step_s = float(timing["median"])
                n = int(timing.get("n") or 1)
                t.step_source = (
                    f"pilot {pilot.id}: median of {n} timed update{'s' if n != 1 else ''} with the optimizer state "
                    f"resident (spread {seconds_text(timing['min'])} to {seconds_text(timing['max'])}); "
                    "a series run's own time replaces it"
                    if not pilot.probed
                    else f"probe {pilot.id}: median of {n} timed step{'s' if n != 1 else ''} of the script as it ran "
                    f"(its own batch, data loading included; spread {seconds_text(timing['min'])} to "
                    f"{seconds_text(timing['max'])}), times the run's updates; a series run's own time replaces it"
                )
                t.step_spread = (float(timing["min"]), float(timing["max"]))
                t.device = str(pilot.stack.get("device") or "cpu")
                busy = (pilot.gate("update_second") or {}).get("busy")
                if busy:
                    t.busy = busy
                    t.step_source += (
                        f"; timed on a busy machine ({busy}): an idle one is likely faster, {pilot.noun} "
                        "again when the box is idle before trusting these hours"
                    )
        t.worst_step_s = _step_duration(pilot, "worst_case")
        if t.eval_s is None and (v := _gate_s(pilot, "validation")) is not None:
            t.eval_s, t.eval_source = (
                v,
                (
                    f"probe {pilot.id}: the script's first evaluation"
                    if pilot.probed
                    else f"pilot {pilot.id}: validation phase (whole split, plus 2 repeat batches)"
                ),
            )
        if pilot.probed:
            t.eval_every, t.eval_every_source = script_eval_every(pilot)
        if t.save_s is None and (v := _gate_s(pilot, "save")) is not None:
            t.save_s, t.save_source = (
                v,
                (
                    f"probe {pilot.id}: the script's first checkpoint"
                    if pilot.probed
                    else f"pilot {pilot.id}: save phase (write and safe reload)"
                ),
            )
        if (v := _gate_s(pilot, "export")) is not None:
            t.export_s, t.export_source = v, f"pilot {pilot.id}: export phase (with replay in a new process)"
        ck_b, ex_b = (pilot.gate("save") or {}).get("bytes"), (pilot.gate("export") or {}).get("bytes")
        if isinstance(ck_b, int) and not isinstance(ck_b, bool):
            t.checkpoint_bytes = ck_b
            t.export_bytes = ex_b if isinstance(ex_b, int) and not isinstance(ex_b, bool) else None
            t.bytes_source = (
                f"probe {pilot.id}: the script's first checkpoint"
                if pilot.probed
                else f"pilot {pilot.id}: save and export phases"
            )
    if t.step_s is None:
        t.why_not = f"no time per update measured for {variant}: no finished series run and no passed pilot or probe"
    return t


def script_eval_every(probe: sh.RunFiles) -> tuple[int | None, str]:
    """How many optimizer steps apart a probed script evaluates, from the evaluations the probe watched: the gap
    between two (the smallest, should they vary), else the step of the only one. None where it watched none."""
    steps = sorted(
        {int(s) for e in probe.events if e.get("kind") == "eval" and isinstance(s := e.get("step"), int) and s > 0}
    )
    gaps = [b - a for a, b in zip(steps, steps[1:], strict=False) if b > a]
    at = ", ".join(str(s) for s in steps[:6]) + (", ..." if len(steps) > 6 else "")
    if gaps:
        return min(gaps), f"probe {probe.id}: the script evaluated every {min(gaps)} steps (at steps {at})"
    if steps:
        return steps[0], f"probe {probe.id}: the script's first evaluation came at step {steps[0]}, taken as its period"
    return None, ""


def seconds_text(x: float | None) -> str:
    return "not measured" if x is None else f"{x:.3g} s"
