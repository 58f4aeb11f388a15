"""The protocol of a campaign: the rules fixed before the first training run, and revisions of them. No torch.

Once a training run exists, the budget, what is held constant, the stop rules,
the validation schedule and the quality metric are its *protocol*: every run
records the rules it used (``run.toml [protocol]``, with the campaign's
``protocol_revision``). Changing them afterwards without declaring a new
revision is *drift*: ``cockpit check`` reports it, ``cockpit series`` refuses
to start, and compare never pools runs of different revisions. ``cockpit
protocol CAMPAIGN --why "..."`` declares the new revision, dated, as a decision.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from pathlib import Path

from . import notebook as nbm
from . import runs
from .notebook.protocol import record as record  # the rules themselves live with the notebook
from .notebook.protocol import rules as rules


def _flat(d: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Nested tables as one level: ``{"stop": {"patience": 3}}`` is ``{"stop.patience": 3}``."""
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def differences(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """``rule old -> new`` for each rule that differs (the revision left out): a run.toml's rules against the
    notebook's."""
    a, b = (
        _flat({k: v for k, v in old.items() if k != "revision"}),
        _flat({k: v for k, v in new.items() if k != "revision"}),
    )
    return [f"{k} {a.get(k, 'unset')} -> {b.get(k, 'unset')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def drift(nb: nbm.Notebook, all_runs: list[runs.RunFiles] | None = None) -> tuple[list[str], list[str]]:
    """(what changed, the training runs of the current revision that used the old rules)."""
    all_runs = all_runs if all_runs is not None else runs.campaign_runs(nb.directory)
    now = rules(nb)
    changed: dict[str, None] = {}
    who: list[str] = []
    for r in runs.training_runs(all_runs):
        used = r.frozen.get("protocol")
        if not isinstance(used, dict) or used.get("revision", 1) != nb.campaign.protocol_revision:
            continue
        diff = differences(used, now)
        if diff:
            who.append(r.id)
            changed.update(dict.fromkeys(diff))
    return list(changed), who


def drift_message(nb: nbm.Notebook, changed: list[str], who: list[str]) -> str:
    return (
        f"{nb.path}: the protocol changed after {len(who)} training run{'s' if len(who) != 1 else ''} of revision "
        f"{nb.campaign.protocol_revision} used it ({', '.join(who[:5])}{' ...' if len(who) > 5 else ''}): "
        f"{'; '.join(changed)}. Runs under different rules cannot be compared. Put the old values back, or declare "
        f'a new revision with `cockpit protocol {nb.directory} --why "what changed and why"` (the runs so far stay '
        "in revision "
        f"{nb.campaign.protocol_revision}, compared only among themselves)."
    )


def declare(campaign: Path | str, why: str) -> tuple[int, list[str]]:
    """Raise the protocol revision, with a dated decision saying why and what changed; (new revision, changes)."""
    declared: list[tuple[int, list[str]]] = []

    def change(nb: nbm.Notebook) -> None:
        changed, _ = drift(nb)
        nb.campaign.protocol_revision += 1
        text = f"protocol revision {nb.campaign.protocol_revision}: {why}"
        if changed:
            text += f" (changed: {'; '.join(changed)})"
        nb.decisions.append(nbm.Decision(date=_dt.date.today().isoformat(), text=text, kind="protocol"))
        declared.append((nb.campaign.protocol_revision, changed))

    nbm.mutate(nbm.find(campaign), change)
    return declared[-1]
