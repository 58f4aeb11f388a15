"""What the series measured, as the sheet states it: the spread over seeds and the expected result. No torch.

Every figure is computed by ``cockpit compare``'s rules, so that the sheet, the report and
``cockpit compare`` agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import notebook as nbm
from ..schema import Metrics


def metric_value(metrics: Metrics | None, metric: str) -> float | None:
    """The final value of the campaign's quality metric in a run's metrics.json (as `cockpit compare` reads it)."""
    if not metrics:
        return None
    from ..compare import quality_of

    v = quality_of(metrics, [], metric)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


# --------------------------------------------------------------------------- statistics


@dataclass
class Spread:
    n: int
    mean: float
    std: float | None  # sample standard deviation; None with one value
    min: float
    max: float
    values: list[float]


def spread(values: list[float]) -> Spread | None:
    """Mean, sample standard deviation (n-1), minimum and maximum of every value, computed by
    ``cockpit.compare.stats`` so that the sheet, the report and ``cockpit compare`` agree."""
    from ..compare import stats

    vals = [float(v) for v in values]
    if not vals:
        return None
    st = stats(vals)
    return Spread(st.n, sum(vals) / len(vals), st.std, min(vals), max(vals), vals)


def fmt_spread(s: Spread, digits: int = 4) -> str:
    sd = f"sd {s.std:.{digits}f}" if s.std is not None else "sd not defined with one seed"
    return (
        f"mean {s.mean:.{digits}f} ({sd}, min {s.min:.{digits}f}, max {s.max:.{digits}f}; "
        f"{s.n} seed{'s' if s.n != 1 else ''}: {', '.join(f'{v:.{digits}f}' for v in s.values)})"
    )


def expected_result(nb: nbm.Notebook, variant: str) -> str:
    """What the series measured for this variant at the notebook's settings, by `cockpit compare`'s rules
    (the latest completed run per seed; runs with other settings, such as a quick look, kept apart)."""
    from ..compare import group_runs, train_runs

    c = nb.campaign
    if nb.is_probe:
        return (
            "not measured: a probe watches the script's first steps and its first save, it does not train to the "
            "end; the script's own evaluation at the end of a full run is its result"
        )
    metric = c.quality_metric
    better = "higher is better" if c.higher_is_better else "lower is better"
    target = f"target {c.quality_target:g} ({better})" if c.quality_target is not None else "no target set"
    trs = [r for r in train_runs(nb) if r.variant == variant]
    group = next((g for g in group_runs(nb, trs) if g.tag == ""), None)
    others = [r for r in trs if r.tag == "" and r.status not in ("completed", "running", "created")]
    apart = sorted({r.tag for r in trs if r.tag})
    if group is None or not group.stats.n:
        finished = [r for r in trs if r.tag == "" and r.status not in ("running", "created")]
        why = (
            f"{len(finished)} series run{'s' if len(finished) != 1 else ''} of {variant} ended without a "
            f"final {metric} ({', '.join(f'{r.id} {r.status}' for r in finished)})"
            if finished
            else f"no series run of {variant} at the notebook's settings has finished"
        )
        text = f"not measured yet: {why}. The campaign's {target} for {metric} is a goal, not a prediction."
        if nb.variant(variant).kind == "memory":
            text += (
                " This is a memory variant: its quality was never measured, and precision, microbatch or "
                "max_length can change it; one training run of it settles that before it is chosen."
            )
    else:
        s = spread(list(group.seeds.values()))
        assert s is not None
        text = (
            f"{metric} at the end of the budget, {fmt_spread(s)} "
            f"(runs {', '.join(group.runs[k] for k in sorted(group.runs))})"
        )
        if c.quality_target is not None:
            ok = [
                v
                for v in group.seeds.values()
                if (v >= c.quality_target if c.higher_is_better else v <= c.quality_target)
            ]
            text += f"; {target}: reached by {len(ok)} of {len(ok) + (s.n - len(ok))} seed{'s' if s.n != 1 else ''}"
        if others:
            text += "; not counted: " + ", ".join(f"{r.id} {r.status} ({r.stop_reason})" for r in others)
    if apart:
        text += f"; runs with other settings are not counted here ({'; '.join(apart)})"
    return text
