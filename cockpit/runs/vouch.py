"""The one rule for "a variant's passed pilot": the pilot that vouches for training a variant at given settings.

A variant's own passed pilot of the same settings and task code vouches for it; else the newest passed pilot of any
variant whose settings differ from these only in :data:`SHARED_SCALARS` (a learning-rate variant shares the
reference's pilot). ``cockpit pilot --all`` groups the variants by it, the series guard refuses by it, and compare
says which pilot covers a variant by it, so none of them can say another thing. No torch.
"""

from __future__ import annotations

from .. import events as ev
from .. import notebook as nbm
from ..contract import Params
from ..notebook.settings import Settings, SettingValue
from .rows import task_revision
from .state import RunFiles

BUDGET_KEYS = ("updates", "epochs", "examples")

# Settings a pilot of one variant vouches for in another: optimizer scalars that change neither what is allocated nor
# which code runs (no optimizer state, no shapes, no precision), only the size of the first updates' steps. A variant
# that differs from a piloted one in these alone shares its pilot: the series measures what they change. Momentum is
# not among them (SGD allocates a buffer for it), nor grad_clip (clipping adds its own temporaries).
SHARED_SCALARS = frozenset({"lr", "weight_decay", "warmup_updates", "schedule"})


def vouched_settings(settings: Settings | Params) -> dict[str, SettingValue]:
    """What a pilot must have run with to vouch for a training run: everything but the budget."""
    return (settings if isinstance(settings, Settings) else Settings(settings)).values(BUDGET_KEYS)


def mechanics(settings: Settings | Params) -> dict[str, SettingValue]:
    """The settings that decide memory and mechanics: what a pilot measures, the optimizer scalars left out."""
    return {k: v for k, v in vouched_settings(settings).items() if k not in SHARED_SCALARS}


def _diff(a: dict[str, SettingValue], b: dict[str, SettingValue]) -> str:
    return ", ".join(
        f"{k} {a.get(k, 'unset')} -> {b.get(k, 'unset')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
    )


def pilot_for(
    nb: nbm.Notebook, all_runs: list[RunFiles], variant: str, settings: Settings | None = None
) -> tuple[RunFiles | None, str]:
    """The passed pilot that vouches for a training run of these settings (the variant's as the notebook says them,
    when None) and this task code, or why none does.

    The variant's own passed pilot of the same settings first; else the newest passed pilot of any variant whose
    settings differ from these only in :data:`SHARED_SCALARS` (a learning-rate variant shares the reference's).
    """
    settings = settings if settings is not None else Settings.of(nb, variant).given()
    code = task_revision(nb.task.entry, nb.directory).get("task_code")
    want = vouched_settings(settings)
    pilots = [r for r in all_runs if r.kind == "pilot" and r.variant == variant]
    passed = [
        r
        for r in all_runs
        if r.kind == "pilot"
        and r.status == ev.Status.PASSED.value
        and (r.frozen.get("revisions") or {}).get("task_code") == code
    ]
    for r in reversed(passed):
        if r.variant == variant and vouched_settings(r.frozen.get("params", {})) == want:
            return r, ""
    for r in reversed(passed):
        if mechanics(r.frozen.get("params", {})) == mechanics(settings):
            return r, ""
    if not pilots:
        return None, f"no pilot of {variant} yet"
    last = pilots[-1]
    if last.status != ev.Status.PASSED.value:
        return None, f"its latest pilot {last.id} ended {last.status} ({last.stop_reason})"
    diff = _diff(vouched_settings(last.frozen.get("params", {})), want)
    if diff:
        return None, f"its latest passed pilot {last.id} ran with other settings ({diff})"
    return None, f"the task code changed since its latest passed pilot {last.id}"


def pilot_groups(nb: nbm.Notebook) -> list[list[str]]:
    """The variants in groups that one pilot vouches for, the reference's group first, each in notebook order."""
    groups: dict[str, list[str]] = {}
    order = [nb.reference.id] + [v.id for v in nb.variants if v.id != nb.reference.id]
    for vid in order:
        key = repr(sorted(mechanics(Settings.of(nb, vid).given()).items()))
        groups.setdefault(key, []).append(vid)
    return list(groups.values())
