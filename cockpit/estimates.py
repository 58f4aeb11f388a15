"""Saved estimates (``cockpit estimate``), read beside measured pilots by the sheet and the plan. No torch.

``cockpit estimate`` writes its result to ``campaigns/<c>/estimates/<variant>.json``; the selection sheet then
shows the prediction beside what a pilot measured on a GPU, with the ratio (measured / predicted), so the trust a
user puts in the next estimate comes from how far the last one was off. An estimate never sizes anything by
itself: the sheet recommends a GPU only from measurements.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TypeGuard

from . import fsutil
from .schema import JSONObject

FOLDER = "estimates"
MIB = 2**20


def path(campaign_dir: Path, variant: str) -> Path:
    return Path(campaign_dir) / FOLDER / f"{variant}.json"


def save(campaign_dir: Path, variant: str, estimate: JSONObject, when: str) -> Path:
    target = path(campaign_dir, variant)
    target.parent.mkdir(exist_ok=True)
    fsutil.write_text(target, json.dumps({"written": when, **estimate}, indent=1))
    return target


def load(campaign_dir: Path, variant: str) -> JSONObject | None:
    """The saved estimate of a variant, or None (absent, unreadable, or not one Cockpit wrote)."""
    try:
        data = json.loads(fsutil.read_regular(path(campaign_dir, variant), 16 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("phases"), list):
        return None
    return data


def predicted(est: JSONObject) -> tuple[float | None, float | None, str]:
    """The estimate's peak allocated and peak reserved (MiB) over its phases, and the phase of the allocated peak."""
    phases = est.get("phases")
    rows = [r for r in phases if isinstance(r, Mapping)] if isinstance(phases, list) else []
    alloc = [(float(a), str(r.get("name", "?"))) for r in rows if _num(a := r.get("allocated_mib"))]
    resv = [float(v) for r in rows if _num(v := r.get("reserved_mib"))]
    top = max(alloc) if alloc else (None, "")
    return top[0], (max(resv) if resv else None), top[1]


def _num(x: object) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def beside(est: JSONObject, measured_allocated_mib: float | None, measured_reserved_mib: float | None) -> str:
    """One line: the estimate, and where a GPU measured the same campaign, the measurement and the ratios."""
    alloc, resv, phase = predicted(est)
    if alloc is None:
        return ""
    said = (
        f"estimate ({est.get('written', 'undated')}, `cockpit estimate`): peak {alloc:,.0f} MiB allocated in "
        f"{phase}" + (f", {resv:,.0f} MiB reserved" if resv is not None else "")
    )
    parts = []
    if measured_allocated_mib is not None:
        parts.append(f"allocated {measured_allocated_mib:,.0f} MiB ({measured_allocated_mib / alloc:.2f}x)")
    if measured_reserved_mib is not None and resv:
        parts.append(f"reserved {measured_reserved_mib:,.0f} MiB ({measured_reserved_mib / resv:.2f}x)")
    if parts:
        return f"{said}; measured: {', '.join(parts)} (measured / predicted)"
    return f"{said}; no GPU measurement of this variant yet to compare (the sizing waits for one)"
