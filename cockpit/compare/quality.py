"""Quality across seeds: every training run's final metric, grouped per variant and settings, with its spread."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from .. import events as ev
from .. import notebook as nbm
from .. import runs
from ..schema import JSON

MEMORY_KNOBS = frozenset(
    {
        "microbatch",
        "accumulation",
        "activation_checkpointing",
        "precision",
        "max_length",
        "eval_microbatch",
        "loss_scale_init",
        "device",
    }
)
STEP_PHASE = "update_second"  # a step with optimizer state resident: the time per step


def number(x: object) -> float | None:
    """A JSON value that is a number (int or float, never a bool), else None."""
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def whole(x: object) -> int | None:
    """A JSON value that is a number, as a whole number (a count), else None."""
    n = number(x)
    return int(n) if n is not None else None


def mapping(x: object) -> Mapping[str, JSON]:
    """A JSON value that is an object, else an empty one."""
    return x if isinstance(x, Mapping) else {}


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
    assert var.mean is not None and ref.mean is not None and var.spread is not None and ref.spread is not None
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


class TrainRunRow(TypedDict):
    """A :class:`TrainRun` as ``cockpit compare`` hands it on (its ``train_runs``, ``not_completed``,
    ``superseded``): the dataclass's fields, in its order."""

    id: str
    variant: str
    seed: int
    status: str
    stop_reason: str
    follows: str
    value: float | None
    updates: int | None
    planned_updates: int | None
    step_time_s: float | None
    tag: str
    dir: str
    superseded_by: str


def train_run_row(r: TrainRun) -> TrainRunRow:
    """The row of a TrainRun (``dataclasses.asdict``'s, without its deep copies: a thousand runs)."""
    return {
        "id": r.id,
        "variant": r.variant,
        "seed": r.seed,
        "status": r.status,
        "stop_reason": r.stop_reason,
        "follows": r.follows,
        "value": r.value,
        "updates": r.updates,
        "planned_updates": r.planned_updates,
        "step_time_s": r.step_time_s,
        "tag": r.tag,
        "dir": r.dir,
        "superseded_by": r.superseded_by,
    }


def differences_text(got: Mapping[str, object], want: Mapping[str, object]) -> str:
    keys = sorted(set(got) | set(want))
    parts = []
    for k in keys:
        if got.get(k) != want.get(k):
            parts.append(f"{k}={got[k]}" if k in got else f"{k} unset")
    return ", ".join(parts)


def quality_of(metrics: ev.Metrics, events: Iterable[ev.Event], metric: str) -> float | None:
    """The run's final value of the quality metric: metrics.json, else its last eval event."""
    if metrics:
        v: object = (
            metrics.get("final_val_loss")
            if metric in ("val_loss", "loss")
            else mapping(metrics.get("final_metrics")).get(metric)
        )
        return ev.finite_or_none(number(v))
    last = None
    for e in ev.iter_kind(events, ev.EVAL):
        last = e
    if last is None:
        return None
    v = last.get("loss") if metric in ("val_loss", "loss") else mapping(last.get("metrics")).get(metric)
    return ev.finite_or_none(number(v))


def train_runs(nb: nbm.Notebook, all_runs: list[runs.RunFiles] | None = None) -> list[TrainRun]:
    """Every training run of the campaign, from its folder (status derived from its events)."""
    out: list[TrainRun] = []
    wanted: dict[str, dict[str, object]] = {}
    for st in runs.training_runs(all_runs if all_runs is not None else runs.campaign_runs(nb.directory)):
        meta = st.frozen.get("run", {})
        vid = st.variant
        params = st.frozen.get("params", {})
        if vid not in wanted:
            try:
                wanted[vid] = {k: v for k, v in nb.params(vid).items() if v is not None}
            except nbm.NotebookError:
                wanted[vid] = {}
        tag = differences_text(params, wanted[vid]) if wanted[vid] else "variant no longer in the notebook"
        revision = (st.frozen.get("protocol") or {}).get("revision", 1)
        rev = int(revision) if isinstance(revision, (int, float, str)) else 1
        if rev != nb.campaign.protocol_revision:  # other rules: never pooled with the current revision's runs
            tag = "; ".join(x for x in (f"protocol revision {rev} (now {nb.campaign.protocol_revision})", tag) if x)
        metrics = st.metrics or {}
        evs = st.events if not metrics else []
        updates = whole(metrics.get("updates"))
        if updates is None and evs:
            steps = [int(e["step"]) for e in ev.iter_kind(evs, ev.STEP) if e.get("step") is not None]
            updates = max(steps) if steps else 0
        out.append(
            TrainRun(
                id=st.id,
                variant=vid,
                seed=int(meta.get("seed", 0)),
                status=st.status,
                stop_reason=st.stop_reason,
                follows=str(meta.get("follows", "")),
                value=quality_of(metrics, evs, nb.campaign.quality_metric),
                updates=updates,
                planned_updates=whole(metrics.get("planned_updates")),
                step_time_s=number(metrics.get("step_time_s")),
                tag=tag,
                dir=str(st.dir),
            )
        )
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


class StatsRow(TypedDict):
    """:class:`Stats` as ``cockpit compare`` hands it on, with its spread."""

    n: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    spread: float | None


class GroupRow(TypedDict):
    """A :class:`Group` as ``cockpit compare`` hands it on (its ``quality``): the dataclass's fields, in its
    order."""

    variant: str
    tag: str
    kind: str
    reference: bool
    stats: StatsRow
    seeds: dict[int, float]
    runs: dict[int, str]
    not_completed: dict[str, int]
    verdict: str
    sentence: str
    diff: float | None
    spread: float | None
    target: str
    target_reached: bool | None


def group_row(g: Group) -> GroupRow:
    s = g.stats
    return {
        "variant": g.variant,
        "tag": g.tag,
        "kind": g.kind,
        "reference": g.reference,
        "stats": {"n": s.n, "mean": s.mean, "std": s.std, "min": s.min, "max": s.max, "spread": s.spread},
        "seeds": dict(g.seeds),
        "runs": dict(g.runs),
        "not_completed": dict(g.not_completed),
        "verdict": g.verdict,
        "sentence": g.sentence,
        "diff": g.diff,
        "spread": g.spread,
        "target": g.target,
        "target_reached": g.target_reached,
    }


def group_runs(nb: nbm.Notebook, trs: list[TrainRun]) -> list[Group]:
    """One group per variant and settings tag; per seed the latest completed run counts."""
    keyed: dict[tuple[str, str], list[TrainRun]] = {}
    for r in trs:
        keyed.setdefault((r.variant, r.tag), []).append(r)
    kinds = {v.id: v.kind for v in nb.variants}
    ref_id = nb.reference.id
    order = {v.id: i for i, v in enumerate(nb.variants)}
    groups: list[Group] = []
    for (vid, tag), members in sorted(
        keyed.items(), key=lambda kv: (kv[0][1] != "", kv[0][1], order.get(kv[0][0], 99))
    ):
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
        seeds = {s: v for s in sorted(counted) if (v := counted[s].value) is not None}
        groups.append(
            Group(
                vid,
                tag,
                kinds.get(vid, "?"),
                vid == ref_id,
                stats(list(seeds.values())),
                seeds,
                {s: counted[s].id for s in sorted(counted)},
                failed,
            )
        )
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
            mean = g.stats.mean if g.stats.mean is not None else float("nan")
            mean_ok = mean >= c.quality_target if c.higher_is_better else mean <= c.quality_target
            g.target_reached = bool(mean_ok)
            g.target = f"{sum(ok)}/{len(ok)} seeds reach {c.quality_target:g}" + (
                "" if mean_ok else "; the mean does not"
            )
    return groups
