"""The rental plan: hours per run from measured times, and what fits in 3, 7 or 30 days. No torch.

Hours per run = updates x time per update + validations x time per
validation + one save (a series run validates every ``every_updates`` and at
its end, and saves its checkpoint once at the end). Each time comes from a
measurement and says which: a series run's ``metrics.json`` (``step_time_s``
per update, ``eval_time_s`` per validation, ``save_time_s`` per save) when one
finished, else the variant's pilot (the second update, optimizer state
resident; the validation, save and export phases), with the number of steps
it is extrapolated from. A variant with no measurement of its own borrows the
reference's only when it changes nothing that costs time (learning rate,
schedule, decay); otherwise it is listed as not measured and never planned.
Exporting the chosen model and the final evaluation come out of the package's
reserve, which is never smaller than the export time the pilot measured.

Runs are queued seed by seed: every quality variant's seed 0 (reference first, then
notebook order), then every seed 1, and so on, so a package cut short still
compares every variant it holds. Packages are filled strictly in that order.

- :mod:`.timing` each variant's measured times (and checkpoint and export sizes), and where each comes from
- :mod:`.disk`   the disk a series needs against the free space of ``runs/``
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field

from .. import arithmetic
from .. import notebook as nbm
from .. import sheet as sh
from ..notebook.settings import Settings
from .disk import Disk, disk_for
from .timing import Timing, measure, seconds_text

__all__ = [
    "DEFAULT_DAYS",
    "DEFAULT_RESERVE_SHARE",
    "DEFAULT_SEEDS",
    "TIME_NEUTRAL",
    "Disk",
    "Package",
    "Plan",
    "RunCost",
    "Timing",
    "boxes_against_one",
    "build",
    "choose",
    "cost",
    "disk_for",
    "measure",
    "render",
    "rental_of",
    "updates_of",
]


DEFAULT_DAYS = (3, 7, 30)
DEFAULT_SEEDS = 3
# Reserve when the notebook gives none: a share of the package kept for the
# final evaluation and export. A policy, stated as such, not a measurement.
DEFAULT_RESERVE_SHARE = 0.10
# Overrides that change what is learned but not what a step costs.
TIME_NEUTRAL = {"lr", "weight_decay", "momentum", "schedule", "warmup_updates", "grad_clip"}


@dataclass
class RunCost:
    variant: str
    updates: int | None
    validations: int
    saves: int
    hours: float | None
    timing: Timing
    why_not: str = ""


@dataclass
class Package:
    days: int
    total_h: float
    reserve_h: float
    reserve_source: str
    fits: list[tuple[str, int, float]] = field(default_factory=list)  # variant, seed, hours
    left_out: list[tuple[str, int, float]] = field(default_factory=list)
    busiest_h: float | None = None  # with runs side by side on several GPUs: the busiest GPUs' hours

    @property
    def available_h(self) -> float:
        return self.total_h - self.reserve_h

    @property
    def used_h(self) -> float:
        """Wall-clock hours the fitted runs take (one after another, or the busiest GPUs' share side by side)."""
        return self.busiest_h if self.busiest_h is not None else sum(h for _, _, h in self.fits)


@dataclass
class Plan:
    campaign: str
    seeds: int
    costs: dict[str, RunCost]
    order: list[tuple[str, int]]
    packages: list[Package]
    unplanned: list[str]
    overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)
    quality_checks: list[str] = field(default_factory=list)  # memory variants given one run to measure quality
    gpus: int = 1
    lanes: int = 1  # runs side by side (GPUs // processes per run)
    disk: Disk | None = None  # for every planned run of the largest package
    memory: list[str] = field(default_factory=list)  # saved estimates beside measured pilots (the GPU to rent)
    measured_by: str = "pilot"  # "probe" in a probe campaign: its times are the script's own
    boxes: int = 1  # boxes of ``gpus`` GPUs each, joined in a Ray cluster (``cockpit plan --boxes N``)

    def wall_h(self) -> float:
        """Hours from the first run to the last for every planned run, each taken by the lane free first."""
        busy = [0.0] * self.lanes
        for v, _ in self.order:
            h = self.costs[v].hours
            if h is not None:
                lane = min(range(self.lanes), key=lambda i: busy[i])
                busy[lane] += h
        return max(busy)


def _dataset_size(all_runs: list[sh.RunFiles]) -> int | None:
    """The training split's size as a pilot's data gate recorded it."""
    for r in reversed(all_runs):
        g = r.gate("data") if r.kind == "pilot" else None
        for c in (g or {}).get("checks", []):
            if c.get("name") == "train split":
                m = re.match(r"\s*([\d,]+)\s+examples", str(c.get("detail", "")))
                if m:
                    return int(m.group(1).replace(",", ""))
    return None


def updates_of(
    nb: nbm.Notebook, variant: str, dataset_size: int | None, given: int | None = None
) -> tuple[int | None, str]:
    """The variant's updates under the campaign's held-constant rule (arithmetic, no timing).

    A probe campaign's script has its own length, which Cockpit cannot read from outside: ``given``
    (``cockpit plan --updates N``) is it, else the run cannot be planned and the message says how."""
    if nb.is_probe:
        if given is not None:
            return given, ""
        command = shlex.join(nb.probe.command) if nb.probe else "the script"
        return None, (
            f"the script's length is its own: Cockpit cannot read how many optimizer steps `{command}` takes; "
            f"give it with `cockpit plan {nb.directory} --updates N`"
        )

    def plan_of(s: Settings) -> arithmetic.BatchPlan:
        if s.dataset_size is None and dataset_size:
            s = s.with_({"dataset_size": dataset_size})
        return arithmetic.plan_from(s)

    try:
        ref = Settings.of(nb, nb.reference.id)
        ref_budget = arithmetic.budget_from(plan_of(ref), ref)
        b = arithmetic.hold(nb.campaign.held_constant, plan_of(Settings.of(nb, variant)), ref_budget)
    except ValueError as exc:
        return None, f"updates unknown: {exc}"
    return b.updates, ""


def cost(nb: nbm.Notebook, variant: str, timing: Timing, updates: int | None, why: str = "") -> RunCost:
    # a probed script validates when it does, which the probe watched; [validation] is Cockpit's own loop's
    every = timing.eval_every or max(1, int(nb.validation.every_updates))
    if updates is None:
        return RunCost(variant, None, 0, 0, None, timing, why)
    n_val = math.ceil(updates / every)  # every `every` updates, and once at the end
    ck_every = int(nb.checkpoints.every_updates or 0)
    # the periodic checkpoints ([checkpoints] every_updates; time-based ones are not counted) and the final save
    n_save = 1 + ((updates - 1) // ck_every if ck_every else 0)
    if not timing.measured:
        return RunCost(variant, updates, n_val, n_save, None, timing, timing.why_not)
    assert timing.step_s is not None  # measured
    seconds = updates * timing.step_s + n_val * (timing.eval_s or 0.0) + n_save * (timing.save_s or 0.0)
    return RunCost(variant, updates, n_val, n_save, seconds / 3600.0, timing)


def build(
    nb: nbm.Notebook,
    days: tuple[int, ...] = DEFAULT_DAYS,
    seeds: int = DEFAULT_SEEDS,
    reserve_hours: float | None = None,
    all_runs: list[sh.RunFiles] | None = None,
    gpus: int | None = None,
    updates: int | None = None,
    boxes: int = 1,
) -> Plan:
    """``gpus``: how many the rented box has (default: as many as the reference's pilot saw, 1 without any);
    runs go side by side, one per ``nproc`` GPUs; ``boxes`` such boxes joined in a Ray cluster hold that many
    times the runs side by side (``cockpit series --ray``: the runs of a series do not talk to each other)."""
    all_runs = sh.campaign_runs(nb.directory) if all_runs is None else all_runs
    ref = nb.reference.id
    # the runs a rental pays for are the series: quality variants (memory variants are
    # ways of running them, compared by their pilots), the reference first
    order_v = [ref] + [v for v in nb.series_variants() if v != ref]
    # and one quality-check run per memory variant that passed its pilot: its quality was never measured
    checks = [
        v.id
        for v in nb.variants
        if v.kind == "memory"
        and v.id not in order_v
        and sh.latest_passed_pilot(all_runs, v.id) is not None
        and not any(r.status == "completed" for r in sh.series_runs(all_runs, v.id))
    ]
    order_v += checks
    ds = _dataset_size(all_runs)
    timings = {v: measure(all_runs, v) for v in order_v}
    ref_t = timings[ref]
    for v in order_v:
        t = timings[v]
        keys = set(nb.variant(v).set)
        if not t.measured and v != ref and ref_t.measured and keys <= TIME_NEUTRAL:
            borrowed = Timing(
                v,
                **{
                    k: getattr(ref_t, k)
                    for k in (
                        "step_s",
                        "step_source",
                        "eval_s",
                        "eval_source",
                        "save_s",
                        "save_source",
                        "export_s",
                        "export_source",
                        "device",
                        "worst_step_s",
                    )
                },
            )
            borrowed.borrowed_from = ref
            timings[v] = borrowed
    costs = {}
    for v in order_v:
        n, why = updates_of(nb, v, ds, updates)
        costs[v] = cost(nb, v, timings[v], n, why)
    quality = [v for v in order_v if v not in checks]
    order = [(v, 0) for v in quality] + [(v, 0) for v in checks] + [(v, s) for s in range(1, seeds) for v in quality]
    unplanned = [v for v in order_v if costs[v].hours is None]
    if gpus is None:
        ref_pilot = sh.latest_measured(all_runs, ref)
        gpus = len((ref_pilot.stack.get("gpus") if ref_pilot else None) or []) or 1
    from ..launch import nproc_for

    lanes = max(1, gpus // nproc_for(nb)) * max(1, boxes)
    packages = []
    for d in days:
        total = 24.0 * d
        if reserve_hours is not None:
            res, src = float(reserve_hours), "--reserve-hours"
        elif nb.rental.reserve_hours > 0:
            res, src = float(nb.rental.reserve_hours), "notebook [rental] reserve_hours"
        else:
            res, src = (
                total * DEFAULT_RESERVE_SHARE,
                (
                    f"{DEFAULT_RESERVE_SHARE:.0%} of the package: a margin chosen by policy, not a measurement; "
                    "set --reserve-hours or [rental] reserve_hours"
                ),
            )
        export = max((c.timing.export_s or 0.0) for c in costs.values()) / 3600.0
        if export > res:
            res, src = export, "the export time the pilot measured (larger than the reserve asked for)"
        pkg = Package(d, total, min(res, total), src)
        busy = [0.0] * lanes  # hours used on each set of GPUs
        stopped = False
        for v, s in order:
            h = costs[v].hours
            if h is None:
                continue
            lane = min(range(lanes), key=lambda i: busy[i])  # the GPUs free first take the next run
            if not stopped and busy[lane] + h <= pkg.available_h:
                pkg.fits.append((v, s, h))
                busy[lane] += h
            else:
                stopped = True  # strict priority: nothing jumps the queue
                pkg.left_out.append((v, s, h))
        pkg.busiest_h = max(busy)
        packages.append(pkg)
    overrides = {v: tuple(nb.variant(v).set) for v in order_v}
    most = max((len(k.fits) for k in packages), default=0)
    disk = disk_for(nb, list(timings.values()), most, lanes)
    plan = Plan(nb.campaign.name, seeds, costs, order, packages, unplanned, overrides, checks, gpus, lanes, disk)
    plan.boxes = max(1, boxes)
    plan.measured_by = "probe" if nb.is_probe else "pilot"
    plan.memory = _estimates_beside_pilots(nb, all_runs)
    return plan


def _estimates_beside_pilots(nb: nbm.Notebook, all_runs: list[sh.RunFiles]) -> list[str]:
    """For each variant with a saved `cockpit estimate`: the prediction beside what its latest GPU pilot measured."""
    from .. import estimates

    out = []
    for v in nb.variants:
        saved = estimates.load(nb.directory, v.id)
        if saved is None:
            continue
        pilot = sh.latest_measured(all_runs, v.id)
        alloc = resv = None
        if pilot is not None and str(pilot.stack.get("device", "")).startswith("cuda"):
            alloc, resv = sh.peaks_mib(sh.phase_rows(pilot))
        line = estimates.beside(saved, alloc, resv)
        if line:
            out.append(f"{v.id}: {line}")
    return out


def _h(x: float) -> str:
    if x < 0.1:
        return f"{x * 60:.1f} min"
    return f"{x:,.1f} h"


def _runs_text(items: list[tuple[str, int, float]]) -> str:
    return ", ".join(f"{v} seed {s}" for v, s, _ in items)


def render(p: Plan) -> list[str]:
    out = [f"Rental plan: campaign {p.campaign}, {p.seeds} seed{'s' if p.seeds != 1 else ''} per variant", ""]
    out.append(
        "Hours per run (updates x time per update + validations x time per validation + saves (the periodic "
        "checkpoints and the last) x time per save):"
    )
    devices = set()
    for v, c in p.costs.items():
        t = c.timing
        if c.hours is None:
            out.append(f"- {v}: cannot be planned: {c.why_not}")
            continue
        devices.add(t.device)
        out.append(
            f"- {v}: **{_h(c.hours)}** = {c.updates} updates x {seconds_text(t.step_s)} + {c.validations} "
            f"validations x {seconds_text(t.eval_s)} + {c.saves} save{'s' if c.saves != 1 else ''} x {seconds_text(t.save_s)}"
            + (
                " (one quality-check run: a memory variant whose quality was never measured)"
                if v in p.quality_checks
                else ""
            )
        )
        if t.borrowed_from:
            changed = ", ".join(f"{k}" for k in sorted(p.overrides.get(v, ())))
            out.append(
                f"  - times borrowed from {t.borrowed_from}: {v} was not timed itself and changes only "
                f"{changed}, which does not change what a step costs"
            )
            continue
        out.append(
            f"  - time per update: {t.step_source}"
            + (f"; the worst-case update took {seconds_text(t.worst_step_s)}" if t.worst_step_s else "")
        )
        out.append(
            f"  - validation: {t.eval_source or 'not measured (counted as 0)'}; save: "
            f"{t.save_source or 'not measured (counted as 0)'}"
        )
        if t.eval_every_source:
            out.append(f"  - validations counted: {c.validations} in {c.updates} steps: {t.eval_every_source}")
        if t.export_s is not None:
            out.append(f"  - export, kept in the reserve: {seconds_text(t.export_s)} ({t.export_source})")
    if devices:
        out.append(
            f"- measured on: {', '.join(sorted(devices))}. These times hold for that machine; on another "
            "machine run the pilot there first, the plan does not scale times between devices."
        )
    out += [f"- memory, {line}" for line in p.memory]
    if p.boxes > 1:
        out.append(
            f"- {p.lanes} runs side by side on {p.boxes} boxes of {p.gpus} GPU{'s' if p.gpus != 1 else ''} each "
            "(a Ray cluster, `cockpit series --ray`; every box priced like the one the pilot ran on), one after "
            "another on each"
        )
    else:
        out.append(
            "- runs run one after another on one machine"
            if p.lanes == 1
            else f"- {p.lanes} runs side by side on {p.gpus} GPUs (each on GPUs of its own), one after another on each"
        )
    out.append("")
    order = ", ".join(f"{v} s{s}" for v, s in p.order if p.costs[v].hours is not None)
    out.append(
        f"Priority order (seed by seed, reference first; after the first seed of every quality variant, one "
        f"quality-check run per memory variant): {order or 'nothing measured'}"
    )
    out.append("")
    for pkg in p.packages:
        head = (
            f"- **{pkg.days} day{'s' if pkg.days != 1 else ''}** ({pkg.total_h:,.0f} h): {_h(pkg.reserve_h)} kept for evaluation and "
            f"export ({pkg.reserve_source}); {_h(pkg.available_h)} for runs."
        )
        if pkg.fits:
            head += (
                f" Fits {len(pkg.fits)} run{'s' if len(pkg.fits) != 1 else ''} "
                f"({_h(pkg.used_h)}): {_runs_text(pkg.fits)}."
            )
            if pkg.left_out:
                head += f" Does not fit: {_runs_text(pkg.left_out)}."
            else:
                head += f" Everything planned fits, {_h(pkg.available_h - pkg.used_h)} spare."
        elif pkg.left_out:
            v, s, h = pkg.left_out[0]
            head += (
                f" **Nothing fits**: the first run in priority order ({v} seed {s}) needs {_h(h)}, "
                f"more than the {_h(pkg.available_h)} available."
            )
        else:
            head += " Nothing can be planned: no variant has a measured time per update."
        out.append(head)
    if p.disk is not None and p.disk.runs:
        out.append("")
        out.append(f"Disk for the largest package's {p.disk.runs} runs: " + p.disk.words() + ".")
    if p.unplanned:
        out.append("")
        unmeasured = [v for v in p.unplanned if not p.costs[v].timing.measured]
        if unmeasured:
            verb = "Probe" if p.measured_by == "probe" else "Pilot"
            out.append(f"Not planned (not measured): {', '.join(unmeasured)}. {verb} them to plan them.")
    return out


def boxes_against_one(many: Plan, one: Plan) -> list[str]:
    """What ``many.boxes`` boxes buy against one: the same planned runs, their wall time and the box-hours paid."""
    n = many.boxes
    t1, tn = one.wall_h(), many.wall_h()
    if not t1:
        return ["Nothing measured to compare boxes with."]
    out = [
        f"{n} boxes against one, for every planned run ({sum(1 for v, _ in one.order if one.costs[v].hours is not None)}"
        f" runs): {_h(tn)} from the first run to the last instead of {_h(t1)} ({t1 / tn:.2f}x sooner), "
        f"{_h(tn * n)} of box time paid instead of {_h(t1)} ({tn * n / t1:.2f}x)"
        + (": the same money, sooner" if tn * n <= t1 * 1.01 else ": boxes idle while the longest runs finish")
        + "."
    ]
    for a, b in zip(one.packages, many.packages, strict=True):
        out.append(
            f"- {a.days} day{'s' if a.days != 1 else ''}: one box fits {len(a.fits)} run{'s' if len(a.fits) != 1 else ''}, "
            f"{n} boxes fit {len(b.fits)} (for {n}x the rent)"
        )
    out.append(
        "Every box needs its own passed pilot's GPU model and the head's Cockpit and torch (docs/ray.md); the head's "
        "disk holds every run's checkpoints, which stream back to it."
    )
    return out


def choose(p: Plan, days: int | None = None) -> Package | None:
    """The package to write down: the one asked for, else the smallest that holds every planned run,
    else the one that holds the most."""
    if not p.packages:
        return None
    if days is not None:
        return next((k for k in p.packages if k.days == days), None)
    complete = [k for k in p.packages if k.fits and not k.left_out]
    if complete:
        return min(complete, key=lambda k: k.days)
    return max(p.packages, key=lambda k: (len(k.fits), -k.days))


def rental_of(p: Plan, pkg: Package) -> nbm.Rental:
    lines = [
        f"{pkg.days} days: {_h(pkg.reserve_h)} kept for evaluation and export; "
        + (f"{len(pkg.fits)} runs ({_h(pkg.used_h)}): {_runs_text(pkg.fits)}" if pkg.fits else "nothing fits")
        + (f"; does not fit: {_runs_text(pkg.left_out)}" if pkg.left_out else "")
    ]
    for v, c in p.costs.items():
        if c.hours is not None:
            lines.append(
                f"{v}: {_h(c.hours)} per run; time per update from {c.timing.step_source}"
                + (f" (borrowed from {c.timing.borrowed_from})" if c.timing.borrowed_from else "")
                + f", measured on {c.timing.device}"
            )
        else:
            lines.append(f"{v}: not planned: {c.why_not}")
    return nbm.Rental(days=pkg.days, reserve_hours=round(pkg.reserve_h, 3), plan="\n".join(lines), notes="")
