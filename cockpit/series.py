"""A series: every chosen variant x seed trained at the campaign's fixed budget. No torch.

Each item becomes a new training run (``kind = "train"``, its own id, started
detached like a pilot) through :func:`cockpit.launch.new_run`; items run one
after another, or ``parallel`` at a time. The plan is made before anything
starts, so the same list is shown, run and recorded:

- a variant x seed that already has a train run gets a new run that names the
  latest of them in ``follows``: nothing is replaced, the lineage is explicit;
- ``rerun`` ids make a new run of the same variant and seed following that run;
- a budget override (``--updates N``) is written into the run's frozen
  parameters, so a quick look is never mistaken for the campaign's budget.

:class:`Series` is non-blocking (``poll()``) so the TUI can drive it on a
timer; :meth:`Series.run` is the blocking loop the CLI uses.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import events as ev
from . import launch, runs
from . import notebook as nbm
from .errors import UsageError

if TYPE_CHECKING:
    from .plan import Disk


@dataclass
class Item:
    variant: str
    seed: int
    follows: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    resume: str = ""  # an existing run to go on with from its newest checkpoint, instead of a new run
    notes: str = ""  # written into the new run's row (an override, a deliberate repeat)

    def label(self) -> str:
        if self.resume:
            return f"{self.variant} seed {self.seed}: resume {self.resume}"
        return f"{self.variant} seed {self.seed}" + (f" (follows {self.follows})" if self.follows else "")


def resumable(nb: nbm.Notebook, ids: list[str] | None = None) -> list[Item]:
    """Training runs that ended from outside (stopped, crashed) with a periodic checkpoint to go on from."""
    out = []
    for row in runs.view(nb):
        if row.kind != "train" or (ids and row.id not in ids):
            continue
        rdir = runs.run_dir(nb.directory, row.id)
        has = (rdir / runs.CHECKPOINTS_DIR).is_dir() and any((rdir / runs.CHECKPOINTS_DIR).glob("update-*.pt"))
        if row.status in launch.RESUMABLE and has:
            out.append(Item(row.variant, row.seed, resume=row.id))
        elif ids:
            why = f"it is {row.status}" if row.status not in launch.RESUMABLE else "it wrote no periodic checkpoint"
            raise UsageError(f"{row.id} cannot be resumed: {why} ({row.stop_reason or 'no reason recorded'})")
    missing = set(ids or []) - {i.resume for i in out}
    if missing:
        raise UsageError(f"no training run {', '.join(sorted(missing))} in {nb.path}; `cockpit runs` lists them")
    return out


@dataclass
class Started:
    item: Item
    run_id: str
    dir: Path
    tail: ev.Tail
    finished: bool = False
    state: runs.RunState | None = None
    gpus: list[int] = field(default_factory=list)  # the GPUs lent to it (CUDA_VISIBLE_DEVICES)


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or ``"0-4"`` (inclusive) or a mix: ``"0-2,7"``."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        a, dash, b = part.partition("-")
        try:
            if dash and a:
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise UsageError(f"--seeds {text!r}: write seeds as 0,1,2 or a range 0-4") from None
    if not out:
        raise UsageError("--seeds: give at least one seed, e.g. --seeds 0,1,2")
    if len(set(out)) != len(out):
        raise UsageError(f"--seeds {text!r} names a seed twice")
    return out


def budget_overrides(updates: int | None) -> dict[str, Any]:
    """Replace the notebook's budget by a number of updates (a quick look); recorded in run.toml."""
    if updates is None:
        return {}
    if updates < 1:
        raise UsageError(f"--updates {updates}: give a whole number >= 1")
    return {"updates": int(updates), "epochs": None, "examples": None}


def default_variants(nb: nbm.Notebook) -> list[str]:
    """The quality variants (memory variants are compared by their pilots); all if none is marked."""
    return nb.series_variants()


def _latest_train(nb: nbm.Notebook, variant: str, seed: int) -> nbm.RunRow | None:
    rows = [r for r in nb.runs if r.kind == "train" and r.variant == variant and r.seed == seed]
    return max(rows, key=lambda r: runs.order_key(r.id)) if rows else None


def intended_params(nb: nbm.Notebook, variant: str, overrides: dict[str, Any]) -> dict[str, Any]:
    params = nb.params(variant)
    params.update(overrides)
    return {k: v for k, v in params.items() if v is not None}


BUDGET_KEYS = ("updates", "epochs", "examples")
BAD_ENDS = (ev.Status.DIVERGED.value, ev.Status.FAILED.value, ev.Status.OOM.value, ev.Status.ERROR.value)


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    """What a pilot must have run with to vouch for a training run: everything but the budget."""
    return {k: v for k, v in params.items() if k not in BUDGET_KEYS and v is not None}


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    return ", ".join(
        f"{k} {a.get(k, 'unset')} -> {b.get(k, 'unset')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
    )


def pilot_for(
    nb: nbm.Notebook, all_runs: list[runs.RunFiles], variant: str, params: dict[str, Any]
) -> tuple[runs.RunFiles | None, str]:
    """The passed pilot that vouches for a training run of these settings and this task code, or why none does."""
    code = runs.task_revision(nb.task.entry, nb.directory).get("task_code")
    want = _settings(params)
    pilots = [r for r in all_runs if r.kind == "pilot" and r.variant == variant]
    for r in reversed(pilots):
        if (
            r.status == ev.Status.PASSED.value
            and _settings(r.frozen.get("params", {})) == want
            and (r.frozen.get("revisions") or {}).get("task_code") == code
        ):
            return r, ""
    if not pilots:
        return None, f"no pilot of {variant} yet"
    last = pilots[-1]
    if last.status != ev.Status.PASSED.value:
        return None, f"its latest pilot {last.id} ended {last.status} ({last.stop_reason})"
    diff = _diff(_settings(last.frozen.get("params", {})), want)
    if diff:
        return None, f"its latest passed pilot {last.id} ran with other settings ({diff})"
    return None, f"the task code changed since its latest passed pilot {last.id}"


def repeated_failure(
    all_runs: list[runs.RunFiles], variant: str, seed: int, params: dict[str, Any]
) -> runs.RunFiles | None:
    """The newest training run of this variant and seed that ended badly with exactly these settings."""
    same = [
        r
        for r in runs.training_runs(all_runs, variant)
        if r.seed == seed
        and r.status in BAD_ENDS
        and {k: v for k, v in r.frozen.get("params", {}).items() if v is not None} == params
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
    from . import protocol

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
    from . import plan

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


def plan(
    nb: nbm.Notebook,
    variants: list[str] | None = None,
    seeds: list[int] | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    skip_done: bool = False,
    rerun: list[str] | None = None,
) -> tuple[list[Item], list[str]]:
    """The items to run, in order, and notes on what was skipped or followed.

    Nothing here refuses: :func:`guard` vets the plan before anything starts (the CLI and the
    TUI call it), so a preview can always be shown.
    """
    return _items(nb, variants, seeds, overrides=overrides, skip_done=skip_done, rerun=rerun)


def _items(
    nb: nbm.Notebook,
    variants: list[str] | None,
    seeds: list[int] | None,
    *,
    overrides: dict[str, Any] | None,
    skip_done: bool,
    rerun: list[str] | None,
) -> tuple[list[Item], list[str]]:
    overrides = dict(overrides or {})
    notes: list[str] = []
    items: list[Item] = []
    if rerun:
        for rid in rerun:
            row = nb.run(rid)
            items.append(Item(row.variant, row.seed, follows=row.id, overrides=dict(overrides)))
        if variants is None and seeds is None:
            return items, notes
    chosen = variants or default_variants(nb)
    for vid in chosen:
        nb.variant(vid)  # a clear error for an unknown id
    for vid in chosen:
        for seed in seeds if seeds is not None else [0, 1, 2]:
            prev = _latest_train(nb, vid, seed)
            if skip_done and prev is not None and prev.status == ev.Status.COMPLETED.value:
                same = _same_params(nb, prev.id, intended_params(nb, vid, overrides))
                if same:
                    notes.append(f"{vid} seed {seed}: skipped, {prev.id} completed with the same settings")
                    continue
            items.append(Item(vid, seed, follows=prev.id if prev is not None else "", overrides=dict(overrides)))
    return items, notes


def _same_params(nb: nbm.Notebook, rid: str, want: dict[str, Any]) -> bool:
    try:
        got = runs.read_run_toml(runs.run_dir(nb.directory, rid)).get("params", {})
    except (FileNotFoundError, OSError):
        return False
    return got == want


CONTEXT_MIB = 600  # a CUDA context per process, on top of what torch reserves (measured on an H200)


def parallel_check(
    campaign: Path | str, variants: list[str], parallel: int, nproc: int = 1, gpus: list[Any] | None = None
) -> list[str]:
    """Notes on whether ``parallel`` runs fit at once (see :func:`fit_parallel`); raises when they do not."""
    return fit_parallel(campaign, variants, parallel, nproc, gpus)[0]


def fit_parallel(
    campaign: Path | str, variants: list[str], parallel: int, nproc: int = 1, gpus: list[Any] | None = None
) -> tuple[list[str], int]:
    """Whether ``parallel`` runs fit at once, from the latest passed pilots' measured peaks.

    On a box with GPUs each run gets GPUs of its own; when there are fewer GPUs
    than ``parallel x nproc``, runs share a GPU only if that many measured peaks
    (plus a CUDA context each) fit in it. Returns notes and how many runs one GPU
    may hold; raises UsageError when they measurably do not fit.
    """
    from . import gpus as gpus_

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
            missing.append(vid)
            continue
        peak, counter = pilot.peak
        if peak is None:
            continue
        stack = pilot.stack
        if counter == runs.GPU_PEAK:
            totals = [g.get("total") for g in stack.get("gpus") or [] if g.get("total")]
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


class Series:
    """Start items detached, at most ``parallel`` alive at once; ``poll()`` advances without blocking."""

    def __init__(
        self,
        campaign: Path | str,
        items: list[Item],
        parallel: int = 1,
        env: dict[str, str] | None = None,
        starter: Callable[..., tuple[str, Path]] | None = None,
        resumer: Callable[..., Path] | None = None,
        placement: Any = None,
        nproc: int = 1,
    ):
        """``placement`` (a ``cockpit.gpus.Placement``) lends each run GPUs of its own, ``nproc`` per run."""
        if parallel < 1:
            raise UsageError(f"--parallel {parallel}: give a whole number >= 1")
        self.placement = placement
        self.nproc = max(1, nproc)
        self.campaign = nbm.find(campaign)
        self.pending: deque[Item] = deque(items)
        self.parallel = parallel
        self.env = dict(env or {})
        if parallel > 1 and "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in self.env:
            # CPU runs side by side: share the cores instead of oversubscribing them.
            self.env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // parallel))
        self._start: Callable[..., tuple[str, Path]] = starter or launch.new_run
        self._resume = resumer or launch.resume_run
        self.started: list[Started] = []
        self.t0 = time.monotonic()

    @property
    def active(self) -> list[Started]:
        return [s for s in self.started if not s.finished]

    @property
    def done(self) -> bool:
        return not self.pending and not self.active

    def poll(self) -> list[tuple[str, Started]]:
        """Reap finished runs, start the next ones; returns ("finished"|"started", run) changes."""
        changes: list[tuple[str, Started]] = []
        launch.reap()
        for s in self.active:
            if not runs.is_alive(s.dir):
                launch.reap()
                s.finished = True
                s.state = runs.state(s.dir)
                if self.placement is not None:
                    self.placement.release(s.gpus)
                if s.state.status == ev.Status.CRASHED.value:  # killed: its process could not write its row
                    runs.settle_run(self.campaign, s.dir)
                changes.append(("finished", s))
        while self.pending and len(self.active) < self.parallel:
            lent: list[int] = []
            env = dict(self.env)
            if self.placement is not None and self.parallel > 1:
                got = self.placement.assign(self.nproc)
                if got is None:
                    break  # every GPU is as full as the pilots' peaks allow: wait for a run to end
                lent = got
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, lent))
            item = self.pending.popleft()
            if item.resume:
                events = runs.run_dir(self.campaign.parent, item.resume) / ev.EVENTS_FILE
                seen = events.stat().st_size if events.is_file() else 0  # its earlier processes' events are old news
                rdir = self._resume(self.campaign, item.resume, env=env or None)
                s = Started(item, item.resume, Path(rdir), ev.Tail(events, offset=seen), gpus=lent)
                self.started.append(s)
                changes.append(("started", s))
                continue
            rid, rdir = self._start(
                self.campaign,
                item.variant,
                item.seed,
                kind="train",
                follows=item.follows,
                overrides=item.overrides or None,
                env=env or None,
                **({"notes": item.notes} if item.notes else {}),
            )
            s = Started(item, rid, Path(rdir), ev.Tail(Path(rdir) / ev.EVENTS_FILE), gpus=lent)
            self.started.append(s)
            changes.append(("started", s))
        return changes

    def progress(self) -> list[tuple[Started, dict[str, Any]]]:
        """New eval and run_end events of the runs started so far (for live lines)."""
        out = []
        for s in self.started:
            for e in s.tail.read_new():
                if e.get("kind") in (ev.EVAL, ev.RUN_END, ev.RUN_START):
                    out.append((s, e))
        return out

    def stop(self) -> list[str]:
        """Stop the runs still alive (SIGTERM, then SIGKILL) and drop the ones not started."""
        self.pending.clear()
        return [f"{s.run_id}: {launch.stop(s.dir)}" for s in self.active]

    def run(
        self,
        on_change: Callable[[str, Started], None] | None = None,
        on_progress: Callable[[Started, dict[str, Any]], None] | None = None,
        poll_s: float = 0.5,
    ) -> list[Started]:
        while True:
            for what, s in self.poll():
                if on_change:
                    on_change(what, s)
            for s, e in self.progress():
                if on_progress:
                    on_progress(s, e)
            if self.done:
                break
            time.sleep(poll_s)
        runs.settle(self.campaign)
        return self.started


def result(s: Started) -> dict[str, Any]:
    """One line of a series summary: the run's state and its metrics.json (if it wrote one)."""
    st = s.state or runs.state(s.dir)
    metrics = runs.read_metrics(s.dir)
    return {
        "run": s.run_id,
        "variant": s.item.variant,
        "seed": s.item.seed,
        "follows": s.item.follows,
        "status": st.status,
        "stop_reason": st.stop_reason,
        "updates": metrics.get("updates"),
        "planned_updates": metrics.get("planned_updates"),
        "final_val_loss": metrics.get("final_val_loss"),
        "best_val_loss": metrics.get("best_val_loss"),
        "step_time_s": metrics.get("step_time_s"),
        "duration_s": st.duration_s,
        "dir": str(s.dir),
    }
