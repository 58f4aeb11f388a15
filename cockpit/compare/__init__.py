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

from pathlib import Path

from .. import events as ev
from .. import notebook as nbm
from .. import runs
from .comparison import Comparison
from .memory import (
    Flag,
    PhaseMem,
    PhaseMemRow,
    PilotMem,
    PilotMemRow,
    flags,
    pilot_mem_row,
    pilot_memory,
    unmeasured_lines,
)
from .quality import (
    MEMORY_KNOBS,
    STEP_PHASE,
    Group,
    GroupRow,
    Stats,
    StatsRow,
    TrainRun,
    TrainRunRow,
    distinguish,
    group_row,
    group_runs,
    quality_of,
    stats,
    train_run_row,
    train_runs,
)
from .render import render

__all__ = [
    "MEMORY_KNOBS",
    "METHOD",
    "STEP_PHASE",
    "Comparison",
    "Flag",
    "Group",
    "GroupRow",
    "PhaseMem",
    "PhaseMemRow",
    "PilotMem",
    "PilotMemRow",
    "Stats",
    "StatsRow",
    "TrainRun",
    "TrainRunRow",
    "collect",
    "curves",
    "distinguish",
    "flags",
    "group_runs",
    "pilot_memory",
    "unmeasured_lines",
    "quality_of",
    "render",
    "stats",
    "summarize",
    "train_runs",
]


def collect(campaign: Path | str) -> Comparison:
    """Everything ``cockpit compare`` shows, as plain values. Reads only: nothing is written."""
    return summarize(nbm.load(campaign))


def summarize(nb: nbm.Notebook, all_runs: list[runs.RunFiles] | None = None) -> Comparison:
    """The comparison of a loaded notebook, from its run folders (the CLI) or runs already read (the TUI's cache)."""
    if all_runs is None:
        all_runs = runs.campaign_runs(nb.directory)
    trs = train_runs(nb, all_runs)
    groups = group_runs(nb, trs)
    mem = {v.id: pilot_memory(nb, v.id, all_runs) for v in nb.variants}
    rows = [_flat(r) for r in trs]  # a thousand runs: dataclasses.asdict's deep copies took most of the time
    c = nb.campaign
    return {
        "campaign": c.name,
        "question": c.question,
        "metric": c.quality_metric,
        "higher_is_better": c.higher_is_better,
        "quality_target": c.quality_target,
        "held_constant": c.held_constant,
        "probe_campaign": nb.is_probe,
        "reference": nb.reference.id,
        "quality": [group_row(g) for g in groups],
        "not_completed": [
            row.copy() for row, r in zip(rows, trs, strict=True) if r.status != ev.Status.COMPLETED.value
        ],
        "superseded": [row.copy() for row, r in zip(rows, trs, strict=True) if r.superseded_by],
        "memory": {vid: pilot_mem_row(m) for vid, m in mem.items()},
        "flags": {v.id: flags(nb, v.id, mem, groups) for v in nb.variants},
        "kinds": {v.id: v.kind for v in nb.variants},
        "method": METHOD,
        "train_runs": rows,
    }


METHOD = (
    "Quality: each seed's value of the metric at the end of its run (the latest completed run per seed); "
    "mean, sample standard deviation (n-1), min and max over seeds. A difference from the reference no larger "
    "than the seeds' spread (the larger of the two ranges, max-min) is not distinguishable; with one seed on "
    "either side nothing is. Runs that did not complete are listed and not averaged in."
)


def _flat(r: TrainRun) -> TrainRunRow:
    """``asdict`` of a TrainRun, whose fields are all plain values (no copy needed)."""
    return train_run_row(r)


def curves(campaign: Path | str, run_ids: list[str]) -> dict[str, list[dict[str, float | None]]]:
    """Each run's curve.csv as rows of floats (None for empty cells), for overlaid loss plots."""
    cdir = nbm.find(campaign).parent
    return {rid: runs.read_csv_rows(runs.run_dir(cdir, rid) / runs.CURVE_FILE) for rid in run_ids}
