"""The series guard: what a series must pass before it starts. No torch.

A passed pilot of the same settings and task code for each variant, no configuration that
already ended badly, an unchanged protocol, room on the disk for its checkpoints and exports
(:func:`guard`), and room in GPU memory or RAM for ``parallel`` runs side by side
(:func:`fit_parallel`). Overrides are recorded as dated decisions (:func:`record_decisions`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .. import events as ev
from .. import notebook as nbm
from .. import runs
from ..errors import UsageError
from ..notebook.settings import Settings
from ..runs import vouch
from .items import Item, intended_params

if TYPE_CHECKING:
    from ..gpus import Gpu
    from ..plan import Disk


# The one rule for which passed pilot vouches for a variant lives with the run folders; the guard asks it.
BUDGET_KEYS = vouch.BUDGET_KEYS
SHARED_SCALARS = vouch.SHARED_SCALARS
mechanics = vouch.mechanics
pilot_for = vouch.pilot_for
pilot_groups = vouch.pilot_groups
BAD_ENDS = ev.ENDED_BY_ITSELF  # a crashed run (killed from outside) may run again with the same settings


def repeated_failure(
    all_runs: list[runs.RunFiles], variant: str, seed: int, settings: Settings
) -> runs.RunFiles | None:
    """The newest training run of this variant and seed that ended badly with exactly these settings."""
    want = settings.values()
    same = [
        r
        for r in runs.training_runs(all_runs, variant)
        if r.seed == seed and r.status in BAD_ENDS and Settings(r.frozen.get("params", {})).values() == want
    ]
    return same[-1] if same else None


class Refused(UsageError):
    """The series guard's refusal; ``reasons`` says each in a few words (the message says what to run)."""

    def __init__(self, message: str, reasons: list[str]) -> None:
        super().__init__(message)
        self.reasons = reasons


def guard(
    nb: nbm.Notebook,
    items: list[Item],
    *,
    without_pilot: str | None = None,
    again: str | None = None,
    parallel: int = 1,
) -> list[str]:
    """Refuse a series the campaign's own record says not to pay for; return the decisions an override makes.

    Refused (one message listing every reason): a protocol that changed after runs used it;
    a variant without a passed pilot of the same settings and task code (``without_pilot``
    overrides); a configuration that already diverged, failed or ran out of memory
    (``again`` overrides); a series whose checkpoints and exports the disk holding ``runs/`` cannot
    hold (sizes from the pilots). Overrides are recorded as decisions and in each run's row.
    """
    from .. import protocol

    all_runs = runs.campaign_runs(nb.directory)
    changed, who = protocol.drift(nb, all_runs)
    if changed:
        raise UsageError(protocol.drift_message(nb, changed, who))
    problems: list[str] = []
    short: list[str] = []  # the same reasons in a few words each, for the TUI's dialog
    decisions: list[str] = []
    missing: dict[str, str] = {}
    for item in items:
        if item.resume:
            continue
        params = intended_params(nb, item.variant, item.overrides)
        if item.variant not in missing:
            pilot, why = pilot_for(nb, all_runs, item.variant, params)
            if pilot is None:
                missing[item.variant] = why
        failed = repeated_failure(all_runs, item.variant, item.seed, params)
        if failed is not None:
            item.follows = failed.id
            if again is None:
                short.append(f"{item.variant} seed {item.seed} ended {failed.status} before ({failed.id})")
                problems.append(
                    f"{item.variant} seed {item.seed}: {failed.id} already ran exactly these settings and "
                    f"ended {failed.status} ({failed.stop_reason}); change a setting, or give --again "
                    '"REASON" to run it once more'
                )
            else:
                item.notes = f"run again although {failed.id} ended {failed.status} with these settings: {again}"
                decisions.append(
                    f"{item.variant} seed {item.seed} run again (as {failed.id} ended {failed.status}): {again}"
                )
    for vid, why in missing.items():
        if without_pilot is None:
            short.append(f"{vid} has no passed pilot ({why})")
            problems.append(
                f"{vid}: no passed pilot with these settings and this task code ({why}); run "
                f"`cockpit pilot {nb.directory} --all` (it pilots each variant that needs its own pilot) or "
                f'`cockpit pilot {nb.directory} --variant {vid}` first, or give --without-pilot "REASON"'
            )
        else:
            decisions.append(f"training {vid} without a passed pilot ({why}): {without_pilot}")
            for item in items:
                if item.variant == vid and not item.resume:
                    item.notes = "; ".join(
                        x for x in (item.notes, f"started without a passed pilot: {without_pilot}") if x
                    )
    disk = disk_for_series(nb, all_runs, items, parallel)
    if not disk.fits:
        problems.append("the disk: " + disk.words())
        short.append("the disk: " + disk.words())
    if problems:
        raise Refused(f"{nb.path}: the series does not start:\n" + "\n".join(f"  - {p}" for p in problems), short)
    return decisions


def disk_for_series(nb: nbm.Notebook, all_runs: list[runs.RunFiles], items: list[Item], parallel: int) -> Disk:
    """The disk these items need (new runs and resumed ones alike write checkpoints) against what is free."""
    from .. import plan

    timings = [plan.measure(all_runs, v) for v in dict.fromkeys(i.variant for i in items)]
    return plan.disk_for(nb, timings, len(items), max(1, parallel))


def record_decisions(campaign: Path | str, decisions: list[str]) -> None:
    """Write the overrides a series was started with as dated decisions."""
    if not decisions:
        return
    import datetime as _dt

    def add(nb: nbm.Notebook) -> None:
        for text in decisions:
            nb.decisions.append(nbm.Decision(date=_dt.date.today().isoformat(), text=text, kind="decision"))

    nbm.mutate(nbm.find(campaign), add)


CONTEXT_MIB = 600  # a CUDA context per process, on top of what torch reserves (measured on an H200)


def parallel_check(
    campaign: Path | str, variants: list[str], parallel: int, nproc: int = 1, gpus: list[Gpu] | None = None
) -> list[str]:
    """Notes on whether ``parallel`` runs fit at once (see :func:`fit_parallel`); raises when they do not."""
    return fit_parallel(campaign, variants, parallel, nproc, gpus)[0]


def fit_parallel(
    campaign: Path | str, variants: list[str], parallel: int, nproc: int = 1, gpus: list[Gpu] | None = None
) -> tuple[list[str], int]:
    """Whether ``parallel`` runs fit at once, from the latest passed pilots' measured peaks.

    On a box with GPUs each run gets GPUs of its own; when there are fewer GPUs
    than ``parallel x nproc``, runs share a GPU only if that many measured peaks
    (plus a CUDA context each) fit in it. Returns notes and how many runs one GPU
    may hold; raises UsageError when they measurably do not fit.
    """
    from .. import gpus as gpus_

    if gpus is None:
        gpus = gpus_.visible()
    if parallel <= 1:
        return [], 1
    cdir = nbm.find(campaign).parent
    all_runs = runs.campaign_runs(cdir)
    peaks: list[tuple[float, str, float | None, str]] = []  # (bytes, counter, total, what total)
    missing = []
    for vid in dict.fromkeys(variants):
        pilot = runs.latest_passed_pilot(all_runs, vid)
        if pilot is None:
            nb = nbm.load(cdir)
            pilot, _ = pilot_for(nb, all_runs, vid, intended_params(nb, vid, {}))
        if pilot is None:
            missing.append(vid)
            continue
        peak, counter = pilot.peak
        if peak is None:
            continue
        stack = pilot.stack
        if counter == runs.GPU_PEAK:
            totals = [t for g in stack.get("gpus") or [] if (t := g.get("total"))]
            peaks.append((peak * 2**20, f"{counter} per GPU", float(min(totals)) if totals else None, "GPU memory"))
        else:
            total = float(stack["memory_total"]) if stack.get("memory_total") else None
            peaks.append((peak * 2**20, counter, total, "RAM"))
    notes = []
    if missing:
        notes.append(
            f"no passed pilot for {', '.join(missing)}: {parallel} parallel runs are not sized from a measurement"
        )
    lanes = parallel * max(nproc, 1)
    per_gpu = -(-lanes // len(gpus)) if gpus else parallel  # runs on one GPU (ceil), or in one RAM on a CPU box
    gpu_peaks = [p for p in peaks if p[3] == "GPU memory"]
    if gpus:
        smallest = float(min(g.total for g in gpus))
        where = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
        if per_gpu == 1:
            notes.append(f"{parallel} at once on {where}: each run on GPUs of its own")
        elif not gpu_peaks:
            raise UsageError(
                f"--parallel {parallel}: {lanes} GPU processes on {where} would put {per_gpu} runs on one GPU, and no "
                f"pilot measured GPU memory to say they fit side by side; run {max(1, len(gpus) // max(nproc, 1))} at "
                "once, or pilot on this GPU first"
            )
        else:
            worst = max(gpu_peaks)
            need = per_gpu * (worst[0] + CONTEXT_MIB * 2**20)
            if need > smallest:
                raise UsageError(
                    f"--parallel {parallel}: {lanes} GPU processes on {where} put {per_gpu} runs on one GPU, needing "
                    f"about {need / 2**20:,.0f} MiB ({per_gpu} x ({worst[0] / 2**20:,.0f} MiB {worst[1]} + "
                    f"{CONTEXT_MIB} MiB CUDA context)), more than its {smallest / 2**20:,.0f} MiB; run "
                    f"{max(1, len(gpus) // max(nproc, 1))} at once (one per GPU)"
                )
            notes.append(
                f"{parallel} at once on {where}: {per_gpu} runs per GPU, about {need / 2**20:,.0f} of "
                f"{smallest / 2**20:,.0f} MiB from the pilots' peaks ({worst[1]})"
            )
        return notes, per_gpu
    if peaks:
        worst = max(peaks)
        need = worst[0] * parallel
        if worst[2] is not None:
            if need > worst[2]:
                raise UsageError(
                    f"--parallel {parallel}: the largest measured peak is {worst[0] / 2**20:,.0f} MiB ({worst[1]}), "
                    f"so {parallel} runs need about {need / 2**20:,.0f} MiB, more than the {worst[2] / 2**20:,.0f} MiB "
                    f"of {worst[3]}; run fewer at once."
                )
            notes.append(
                f"{parallel} at once: about {need / 2**20:,.0f} of {worst[2] / 2**20:,.0f} MiB {worst[3]} "
                f"from the pilots' peaks ({worst[1]})"
            )
    return notes, per_gpu
