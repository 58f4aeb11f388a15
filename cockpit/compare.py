"""Compare variants across seeds, and memory variants side by side. No torch, no textual.

Quality: per variant, every seed's value of the campaign's quality metric at
the end of its run, with n, mean, sample standard deviation (n - 1), minimum
and maximum. A difference from the reference no larger than the spread between
seeds (the larger of the two variants' ranges, max - min) is reported as *not
distinguishable*; with fewer than two seeds on either side there is no spread,
so no difference is distinguishable. The best single run is never shown on
its own. Runs that did not complete are listed with their reason, never
dropped silently; runs with settings other than the notebook's (a budget
override, ``--set``, a notebook changed since) form their own group.

Memory and time: per variant, the latest passed pilot's peak per phase (by the
one rule of ``cockpit.runs``: torch peak reserved on a GPU, else the process's
peak RSS) and time per step (the update_second phase), side by side with the reference, with flags for
a variant that changed the experimental question: a different effective batch,
a shorter maximum length that truncates targets, the quality target not reached,
or settings other than memory settings changed by a memory variant.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import arithmetic, runs
from . import events as ev
from . import notebook as nbm

# What a memory variant may change without changing the experimental question.
MEMORY_KNOBS = frozenset({
    "microbatch", "accumulation", "activation_checkpointing", "precision", "max_length", "eval_microbatch",
    "loss_scale_init", "device",
})
STEP_PHASE = "update_second"  # a step with optimizer state resident: the time per step


# --------------------------------------------------------------------------- statistics


@dataclass
class Stats:
    n: int
    mean: float | None
    std: float | None  # sample standard deviation (n - 1); None when n < 2
    min: float | None
    max: float | None

    @property
    def spread(self) -> float | None:
        """The range between seeds (max - min); None when n < 2."""
        if self.n < 2 or self.max is None or self.min is None:
            return None
        return self.max - self.min


def stats(values: list[float]) -> Stats:
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return Stats(0, None, None, None, None)
    mean = sum(xs) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n >= 2 else None
    return Stats(n, mean, std, min(xs), max(xs))


def distinguish(var: Stats, ref: Stats, higher_is_better: bool = False) -> tuple[str, str]:
    """(verdict, sentence): "reference-like" outcomes say *not distinguishable*, never better or worse."""
    if var.n == 0 or ref.n == 0:
        return "no data", "no completed run on one side"
    if var.n < 2 or ref.n < 2:
        return "not distinguishable", (
            f"not distinguishable: {min(var.n, ref.n)} seed on one side, so no spread between seeds is measured"
        )
    diff = var.mean - ref.mean
    spread = max(var.spread, ref.spread)
    if abs(diff) <= spread:
        return "not distinguishable", (
            f"not distinguishable: difference {diff:+.4g} is within the seeds' spread {spread:.4g}"
        )
    better = diff > 0 if higher_is_better else diff < 0
    word = "better" if better else "worse"
    return word, f"{word} than the reference by {abs(diff):.4g}, more than the seeds' spread {spread:.4g}"


# --------------------------------------------------------------------------- runs


@dataclass
class TrainRun:
    id: str
    variant: str
    seed: int
    status: str
    stop_reason: str
    follows: str
    value: float | None  # the quality metric at the end of the run
    updates: int | None
    planned_updates: int | None
    step_time_s: float | None
    tag: str  # settings that differ from the notebook's variant ("" = as the notebook says)
    dir: str
    superseded_by: str = ""


def _differences(got: dict[str, Any], want: dict[str, Any]) -> str:
    keys = sorted(set(got) | set(want))
    parts = []
    for k in keys:
        if got.get(k) != want.get(k):
            parts.append(f"{k}={got[k]}" if k in got else f"{k} unset")
    return ", ".join(parts)


def quality_of(metrics: dict[str, Any], events: list[dict[str, Any]], metric: str) -> float | None:
    """The run's final value of the quality metric: metrics.json, else its last eval event."""
    if metrics:
        if metric in ("val_loss", "loss"):
            v = metrics.get("final_val_loss")
        else:
            v = (metrics.get("final_metrics") or {}).get(metric)
        return ev.finite_or_none(v)
    last = None
    for e in ev.iter_kind(events, ev.EVAL):
        last = e
    if last is None:
        return None
    v = last.get("loss") if metric in ("val_loss", "loss") else (last.get("metrics") or {}).get(metric)
    return ev.finite_or_none(v)


def train_runs(nb: nbm.Notebook, all_runs: list[runs.RunFiles] | None = None) -> list[TrainRun]:
    """Every training run of the campaign, from its folder (status derived from its events)."""
    out: list[TrainRun] = []
    wanted: dict[str, dict[str, Any]] = {}
    for st in runs.training_runs(all_runs if all_runs is not None else runs.campaign_runs(nb.directory)):
        meta = st.frozen.get("run", {})
        vid = st.variant
        params = st.frozen.get("params", {})
        if vid not in wanted:
            try:
                wanted[vid] = {k: v for k, v in nb.params(vid).items() if v is not None}
            except nbm.NotebookError:
                wanted[vid] = {}
        tag = _differences(params, wanted[vid]) if wanted[vid] else "variant no longer in the notebook"
        metrics = st.metrics or {}
        evs = st.events if not metrics else []
        updates = metrics.get("updates")
        if updates is None and evs:
            steps = [e.get("step") for e in ev.iter_kind(evs, ev.STEP) if e.get("step") is not None]
            updates = max(steps) if steps else 0
        out.append(TrainRun(
            id=st.id, variant=vid, seed=int(meta.get("seed", 0)), status=st.status, stop_reason=st.stop_reason,
            follows=str(meta.get("follows", "")), value=quality_of(metrics, evs, nb.campaign.quality_metric),
            updates=updates, planned_updates=metrics.get("planned_updates"), step_time_s=metrics.get("step_time_s"),
            tag=tag, dir=str(st.dir),
        ))
    out.sort(key=lambda r: runs.order_key(r.id))
    return out


@dataclass
class Group:
    variant: str
    tag: str
    kind: str
    reference: bool
    stats: Stats
    seeds: dict[int, float]  # seed -> value (the latest completed run of that seed)
    runs: dict[int, str]  # seed -> run id counted
    not_completed: dict[str, int] = field(default_factory=dict)  # status -> runs whose seed has no completed run
    verdict: str = ""
    sentence: str = ""
    diff: float | None = None
    spread: float | None = None  # the spread the difference was held against (larger of the two ranges)
    target: str = ""
    target_reached: bool | None = None


def group_runs(nb: nbm.Notebook, trs: list[TrainRun]) -> list[Group]:
    """One group per variant and settings tag; per seed the latest completed run counts."""
    keyed: dict[tuple[str, str], list[TrainRun]] = {}
    for r in trs:
        keyed.setdefault((r.variant, r.tag), []).append(r)
    kinds = {v.id: v.kind for v in nb.variants}
    ref_id = nb.reference.id
    order = {v.id: i for i, v in enumerate(nb.variants)}
    groups: list[Group] = []
    for (vid, tag), members in sorted(keyed.items(), key=lambda kv: (kv[0][1] != "", kv[0][1], order.get(kv[0][0], 99))):
        counted: dict[int, TrainRun] = {}
        for r in members:  # sorted by id: a later completed run of the same seed supersedes an earlier one
            if r.status == ev.Status.COMPLETED.value and r.value is not None:
                if r.seed in counted:
                    counted[r.seed].superseded_by = r.id
                counted[r.seed] = r
        failed: dict[str, int] = {}
        for r in members:
            if r.seed not in counted and r.status != ev.Status.COMPLETED.value:
                failed[r.status] = failed.get(r.status, 0) + 1
            elif r.status == ev.Status.COMPLETED.value and r.value is None and r.seed not in counted:
                failed["no value"] = failed.get("no value", 0) + 1
        seeds = {s: counted[s].value for s in sorted(counted)}
        groups.append(Group(vid, tag, kinds.get(vid, "?"), vid == ref_id, stats(list(seeds.values())), seeds,
                            {s: counted[s].id for s in sorted(counted)}, failed))
    c = nb.campaign
    for g in groups:
        ref = next((x for x in groups if x.reference and x.tag == g.tag), None)
        if g.reference:
            g.verdict, g.sentence = "reference", "the reference"
        elif ref is None:
            g.verdict, g.sentence = "no reference", "no completed reference run with the same settings to compare with"
        else:
            g.verdict, g.sentence = distinguish(g.stats, ref.stats, c.higher_is_better)
            if g.stats.mean is not None and ref.stats.mean is not None:
                g.diff = g.stats.mean - ref.stats.mean
            if g.stats.spread is not None and ref.stats.spread is not None:
                g.spread = max(g.stats.spread, ref.stats.spread)
        if c.quality_target is not None and g.stats.n:
            ok = [v >= c.quality_target if c.higher_is_better else v <= c.quality_target for v in g.seeds.values()]
            mean_ok = g.stats.mean >= c.quality_target if c.higher_is_better else g.stats.mean <= c.quality_target
            g.target_reached = bool(mean_ok)
            g.target = f"{sum(ok)}/{len(ok)} seeds reach {c.quality_target:g}" + ("" if mean_ok else "; the mean does not")
    return groups


# --------------------------------------------------------------------------- memory and time


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
    truncation: dict[str, Any] | None
    params_note: str = ""


def _data_gate(all_runs: list[runs.RunFiles], vid: str) -> tuple[str, dict[str, Any]] | None:
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
    pilot = runs.latest_passed_pilot(all_runs, vid)
    params = {k: v for k, v in nb.params(vid).items() if v is not None}
    data = _data_gate(all_runs, vid)
    if pilot is None:
        ml = params.get("max_length")
        trunc = data[1].get("truncation") if data else None
        ml = (data[1].get("inputs") or {}).get("max_length", ml) if data else ml
        return PilotMem(vid, None, {}, None, "", None, int(ml) if isinstance(ml, int) else None,
                        trunc if isinstance(trunc, dict) else None)
    evs = pilot.events
    phases: dict[str, PhaseMem] = {}
    max_length = None
    truncation = None
    for g in ev.gates(evs):
        mem = g.get("mem") or {}
        peak, counter = runs.mem_peak(mem)
        reserved = (mem.get("torch") or {}).get("peak_reserved")
        phases[g["phase"]] = PhaseMem(g["phase"], peak, reserved, counter, g.get("duration_s"))
        if g["phase"] == "data":
            max_length = (g.get("inputs") or {}).get("max_length")
            truncation = g.get("truncation")
    steps = [e.get("duration_s") for e in ev.iter_kind(evs, ev.STEP) if e.get("phase") == STEP_PHASE and e.get("duration_s")]
    step_time = steps[-1] if steps else (phases[STEP_PHASE].duration_s if STEP_PHASE in phases else None)
    peaks = [p.peak for p in phases.values() if p.peak is not None]
    counter = next((p.counter for p in phases.values()), "")
    if max_length is None and isinstance(params.get("max_length"), int):
        max_length = params["max_length"]
    frozen = pilot.frozen.get("params", {})
    note = _differences(frozen, params)
    return PilotMem(vid, pilot.id, phases, max(peaks) if peaks else None, counter, step_time, max_length,
                    truncation if isinstance(truncation, dict) else None,
                    f"pilot {pilot.id} ran with {note}, not the notebook's current settings" if note else "")


def _trunc_counts(tr: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The data gate's truncation record: one dict, or one per split."""
    if "lose_target_tokens" in tr or "examples" in tr:
        return [("", tr)]
    return [(k, v) for k, v in tr.items() if isinstance(v, dict)]


def flags(nb: nbm.Notebook, vid: str, mem: dict[str, PilotMem], groups: list[Group]) -> list[dict[str, str]]:
    """What makes a variant answer a different question than the reference, or leaves it unknown."""
    out: list[dict[str, str]] = []
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
                out.append({"flag": "not only memory settings",
                            "detail": "also changes " + ", ".join(f"{k}={val}" for k, val in other.items())})
    m, r = mem.get(vid), mem.get(ref.id)
    ml, rml = (m.max_length if m else None), (r.max_length if r else None)
    tr = m.truncation if m else None
    if tr is not None:
        for split, t in _trunc_counts(tr):
            lose = int(t.get("lose_target_tokens") or 0)
            where = f" ({split})" if split else ""
            text = (f"max_length {t.get('max_length', ml)}: {lose} of {int(t.get('examples') or 0)} examples{where} "
                    f"lose target tokens, {int(t.get('no_target_left') or 0)} have no target left")
            if t.get("longer_than_max") is not None:
                text += f" ({int(t['longer_than_max'])} are longer than max_length)"
            if lose and (vid != ref.id and (rml is None or ml is None or ml < rml)):
                out.append({"flag": "shorter max_length truncates targets", "detail": text})
            elif lose:
                out.append({"flag": "targets truncated", "detail": text})
    elif vid != ref.id and ml is not None and rml is not None and ml < rml:
        out.append({"flag": "shorter max_length: truncation not measured",
                    "detail": f"max_length {rml} -> {ml}; the pilot's data gate recorded no truncation count"
                    + ("" if m and m.run else " (no passed pilot for this variant)")})
    if c.quality_target is not None:
        own = [g for g in groups if g.variant == vid and g.tag == ""]
        if own and own[0].target_reached is False:
            out.append({"flag": "quality target not reached",
                        "detail": f"mean {c.quality_metric} {own[0].stats.mean:.4g}; {own[0].target}"})
    return out


# --------------------------------------------------------------------------- the comparison


def collect(campaign: Path | str) -> dict[str, Any]:
    """Everything ``cockpit compare`` shows, as plain values. Reads only: nothing is written."""
    return summarize(nbm.load(campaign))


def summarize(nb: nbm.Notebook) -> dict[str, Any]:
    """The comparison of a loaded notebook, read from its run folders (the CLI and the TUI alike)."""
    all_runs = runs.campaign_runs(nb.directory)
    trs = train_runs(nb, all_runs)
    groups = group_runs(nb, trs)
    mem = {v.id: pilot_memory(nb, v.id, all_runs) for v in nb.variants}
    c = nb.campaign
    return {
        "campaign": c.name,
        "question": c.question,
        "metric": c.quality_metric,
        "higher_is_better": c.higher_is_better,
        "quality_target": c.quality_target,
        "held_constant": c.held_constant,
        "reference": nb.reference.id,
        "quality": [{**asdict(g), "stats": {**asdict(g.stats), "spread": g.stats.spread}} for g in groups],
        "not_completed": [asdict(r) for r in trs if r.status != ev.Status.COMPLETED.value],
        "superseded": [asdict(r) for r in trs if r.superseded_by],
        "memory": {vid: _mem_dict(m) for vid, m in mem.items()},
        "flags": {v.id: flags(nb, v.id, mem, groups) for v in nb.variants},
        "kinds": {v.id: v.kind for v in nb.variants},
        "method": METHOD,
        "train_runs": [asdict(r) for r in trs],
    }


METHOD = (
    "Quality: each seed's value of the metric at the end of its run (the latest completed run per seed); "
    "mean, sample standard deviation (n-1), min and max over seeds. A difference from the reference no larger "
    "than the seeds' spread (the larger of the two ranges, max-min) is not distinguishable; with one seed on "
    "either side nothing is. Runs that did not complete are listed and not averaged in."
)


def _mem_dict(m: PilotMem) -> dict[str, Any]:
    d = asdict(m)
    d["phases"] = {k: asdict(v) for k, v in m.phases.items()}
    return d


def curves(campaign: Path | str, run_ids: list[str]) -> dict[str, list[dict[str, float | None]]]:
    """Each run's curve.csv as rows of floats (None for empty cells), for overlaid loss plots."""
    cdir = nbm.find(campaign).parent
    return {rid: runs.read_csv_rows(runs.run_dir(cdir, rid) / runs.CURVE_FILE) for rid in run_ids}


# --------------------------------------------------------------------------- rich tables


def _f(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def _mib(b: float | None) -> str:
    return "absent" if b is None else f"{b / 2**20:,.0f}"


def render(data: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    metric = data["metric"]
    way = "higher is better" if data["higher_is_better"] else "lower is better"
    console.print(f"[bold]{data['campaign']}[/]: {data['question']}", highlight=False)
    q = Table(title=f"{metric} across seeds ({way}; reference {data['reference']})", title_justify="left")
    for col, just in (("variant", "left"), ("n", "right"), ("mean", "right"), ("std", "right"), ("min", "right"),
                      ("max", "right"), ("each seed", "left"), ("vs reference", "left")):
        q.add_column(col, justify=just, overflow="fold", no_wrap=col in ("n", "mean", "std", "min", "max"))
    for g in data["quality"]:
        s = g["stats"]
        name = g["variant"] + (f" [dim]({g['tag']})[/]" if g["tag"] else "")
        seeds = ", ".join(f"s{k}={v:.4g}" for k, v in g["seeds"].items())
        if g["not_completed"]:
            seeds += ("; " if seeds else "") + ", ".join(f"{n} {st}" for st, n in g["not_completed"].items())
        verdict = g["verdict"]
        if g["diff"] is not None:
            verdict += f" ({g['diff']:+.3g}" + (f"; spread {g['spread']:.3g})" if g["spread"] is not None else "; no spread)")
        style = {"better": "green", "worse": "red", "not distinguishable": "yellow"}.get(g["verdict"], "")
        q.add_row(name, str(s["n"]), _f(s["mean"]), _f(s["std"]), _f(s["min"]), _f(s["max"]), seeds,
                  f"[{style}]{verdict}[/]" if style else verdict)
    if not data["quality"]:
        console.print("no train runs yet: run `cockpit series CAMPAIGN` first", style="yellow")
    else:
        console.print(q)
        for g in data["quality"]:
            if g["target"]:
                console.print(f"{g['variant']}{' (' + g['tag'] + ')' if g['tag'] else ''}: target {data['metric']} "
                              f"{'>=' if data['higher_is_better'] else '<='} {data['quality_target']:g}: {g['target']}",
                              highlight=False, style="" if g["target_reached"] else "yellow")
    if data["not_completed"]:
        t = Table(title="runs that did not complete (kept, not averaged in)", title_justify="left")
        for col in ("run", "variant", "seed", "status", "updates", "follows", "stop reason"):
            t.add_column(col, overflow="fold", no_wrap=col != "stop reason")
        for r in data["not_completed"]:
            upd = "" if r["updates"] is None else str(r["updates"]) + (f"/{r['planned_updates']}" if r["planned_updates"] else "")
            t.add_row(r["id"], r["variant"], str(r["seed"]), f"[red]{r['status']}[/]", upd, r["follows"], r["stop_reason"])
        console.print(t)
    for r in data["superseded"]:
        console.print(f"{r['id']} ({r['variant']} seed {r['seed']}, {metric} {_f(r['value'])}) is superseded by "
                      f"{r['superseded_by']} of the same seed: only the later run counts", style="dim", highlight=False)
    _render_memory(data, console)
    console.print(data["method"], style="dim", highlight=False)


def _render_memory(data: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    mem = data["memory"]
    ref = data["reference"]
    # the reference, every memory variant, and any other variant with a passed pilot
    vids = [ref] + [v for v in mem if v != ref and (mem[v]["run"] or data["kinds"].get(v) == "memory")]
    unmeasured = [v for v in mem if v not in vids]
    measured = [v for v in vids if mem[v]["run"]]
    counters = {mem[v]["counter"] for v in measured}
    counter = " / ".join(sorted(counters)) or "no measurement"
    t = Table()
    t.add_column("phase", no_wrap=True)
    for v in vids:
        head = v + (" (ref)" if v == ref else "") + (f"\n{data['kinds'].get(v, '')}" if data["kinds"].get(v) == "memory" else "")
        head += f"\n{mem[v]['run'] or 'no passed pilot'}"
        t.add_column(head, justify="right", overflow="fold")
    phases = [p for p in ev.PHASES if any(p in mem[v]["phases"] for v in vids)]
    for p in phases:
        cells = []
        for v in vids:
            pm = mem[v]["phases"].get(p)
            cells.append("" if pm is None else f"{_mib(pm['peak'])} · {_f(pm['duration_s'], 3)}")
        t.add_row(p, *cells)
    rpeak, rstep = mem[ref]["peak"], mem[ref]["step_time_s"]
    t.add_row("[bold]peak[/]", *[_mib(mem[v]["peak"]) + (f" ({mem[v]['peak'] / rpeak:.2f}x)" if mem[v]["peak"] and rpeak and v != ref else "") for v in vids])
    t.add_row("[bold]s per step[/]", *[_f(mem[v]["step_time_s"], 3) + (f" ({mem[v]['step_time_s'] / rstep:.2f}x)" if mem[v]["step_time_s"] and rstep and v != ref else "") for v in vids])
    if measured:
        console.print(f"[italic]memory (MiB, {counter}) · time (s) per phase, from the latest passed pilot of each variant[/]",
                      highlight=False)
        console.print(t)
        if runs.HOST_PEAK in counters:
            console.print("on a CPU the peak is the pilot process's RSS, which includes the Python and torch runtime; "
                          "GPU counters are absent here, not zero", style="dim", highlight=False)
    else:
        console.print("no passed pilot yet: run `cockpit pilot CAMPAIGN --variant ID` for memory and time per phase",
                      style="yellow")
    if unmeasured:
        console.print(f"no passed pilot (not in the table): {', '.join(unmeasured)}", style="dim", highlight=False)
    for v in mem:
        fl = [f for f in data["flags"].get(v) or [] if f["flag"] != "quality target not reached"]  # shown above
        note = mem[v].get("params_note")
        for f in fl:
            console.print(f"[bold red]{v}[/]: {f['flag']}: {f['detail']}", highlight=False)
        if note:
            console.print(f"[yellow]{v}[/]: {note}", highlight=False)
