"""The campaign's runs table as data: a row per run, what the filter matches, the sort keys, one folder read.

No widgets here: the campaign screen draws these rows (``CampaignScreen``) and
reads the folders in a worker through :func:`scan_one`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text

from .. import notebook as nbm
from .. import runs
from . import format as fm
from . import progress as pg
from . import style as sty
from .ingest import RunFeed
from .plain import one_line
from .runcache import RunCache

# Fixed widths: rows change in place as runs progress, and columns must not jump.
RUN_COLUMNS = (
    ("run", "run", 5),
    ("variant", "variant", 8),
    ("seed", "seed", 4),
    ("status", "status", 9),
    ("phase", "phase", 12),
    ("peak", "peak MiB", 8),
    ("time", "time", 6),
    ("verdict", "verdict", 8),
    ("reason", "stop reason", None),
)
WIDE_RUNS = 110  # from this many columns the run table has room for the stop reason


def columns_for(width: int) -> list[str]:
    """The run table's columns at this terminal width: below WIDE_RUNS the stop reason has no room in the
    table (at 80 columns one character of it showed) and is read in the detail line under it instead."""
    return [key for key, _, _ in RUN_COLUMNS if width >= WIDE_RUNS or key != "reason"]


SORTS = ("run", "variant", "seed", "status", "peak", "time", "verdict")
FILTER_KEYS = {
    "variant": "variant",
    "v": "variant",
    "status": "status",
    "s": "status",
    "seed": "seed",
    "kind": "kind",
    "verdict": "verdict",
}


@dataclass
class RunView:
    """One row of the table, as shown: the notebook row and what the run folder says now."""

    id: str
    variant: str
    seed: int | None
    kind: str
    status: str
    phase: str
    peak: float | None
    secs: float | None
    verdict: str
    reason: str

    def cells(self) -> tuple[Text, ...]:
        return (
            Text(self.id, style="bold"),
            one_line(self.variant, limit=40),
            Text("" if self.seed is None else str(self.seed)),
            sty.status_text(self.status),
            one_line(self.phase, limit=40),
            Text(f"{self.peak:,.0f}" if self.peak is not None else "-", justify="right"),
            Text(fm.duration(self.secs)),
            one_line(self.verdict, style="italic", limit=60),
            one_line(self.reason, style="dim", limit=300),
        )

    def text(self) -> str:
        return " ".join((self.id, self.variant, self.kind, self.status, self.phase, self.verdict, self.reason)).lower()


def view_of(
    rid: str,
    row: nbm.RunRow | None,
    st: runs.RunState | None,
    reading: bool = False,
    meta: tuple[str, int, str] | None = None,
) -> RunView:
    """A run as the table shows it: the notebook's row, else what its run.toml says, and its state."""
    status = st.status if st else (row.status if row else "?")
    if st is None and reading:
        status = "reading"
    phase = (st.phase if st else None) or (row.phase if row else "") or ""
    peak = st.peak_mib if st else None  # the one rule (cockpit.runs): gates and the final event alike
    if peak is None and row is not None:
        peak = row.peak_mib
    secs = st.duration_s if st and st.started is not None else (row.duration_s if row else None)
    reason = (st.stop_reason if st else "") or (row.stop_reason if row else "")
    variant, seed, kind = meta if meta is not None else ("?", None, "")
    return RunView(
        rid,
        row.variant if row else variant,
        row.seed if row else seed,
        row.kind if row else kind,
        status,
        phase,
        peak,
        secs,
        row.verdict if row else "",
        reason,
    )


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


def run_cells(rid: str, row: nbm.RunRow | None, st: runs.RunState | None) -> tuple[Text, ...]:
    """The table's cells for one run (kept for tests and the benchmark)."""
    return view_of(rid, row, st).cells()


def scan_one(
    cache: RunCache,
    p: Path,
    followed: set[str],
    states: dict[str, runs.RunState],
    live: list[str],
    meta: dict[str, tuple[str, int, str]],
    verify: bool = True,
) -> None:
    """One run folder into ``states``/``meta`` (or ``live``: its reader follows it).

    A finished run read before is taken from the cache; its files are looked at again
    (``verify``: three ``stat`` calls) only when asked, so a scan of a thousand finished runs
    can check them a slice at a time.
    """
    rid = p.name
    cached = cache.get(p)
    final = cached is not None and cached.files.state is not None and cached.files.state.final
    if final and cached is not None and (not verify or cached.stamp == cache.stamp(p)):
        assert cached.files.state is not None
        states[rid] = cached.files.state
        meta[rid] = (cached.files.variant, cached.files.seed, cached.files.kind)
        return
    if rid in followed or runs.is_alive(p):
        live.append(rid)
        m = runs.run_meta(p)
        meta[rid] = (str(m.get("variant", "?")), _int(m.get("seed")), str(m.get("kind", "pilot")))
        return
    files = cache.read(p)
    if files is not None and files.state is not None:
        states[rid] = files.state
        meta[rid] = (files.variant, files.seed, files.kind)


# ---------------------------------------------------------------- filtering and sorting


def matches(v: RunView, query: str) -> bool:
    """``variant:ID status:WORD seed:N|A-B kind:pilot verdict:WORD`` and free words; every term must hold."""
    for term in query.lower().split():
        key, sep, value = term.partition(":")
        field = FILTER_KEYS.get(key) if sep else None
        if field is None:
            if term == "bad":
                if v.status not in sty.BAD_STATUSES:
                    return False
            elif term not in v.text():
                return False
        elif field == "seed":
            lo, dash, hi = value.partition("-")
            try:
                a, b = int(lo), int(hi) if dash else int(lo)
            except ValueError:
                return False
            if v.seed is None or not a <= v.seed <= b:
                return False
        elif field == "status":
            if value == "bad":
                if v.status not in sty.BAD_STATUSES:
                    return False
            elif not v.status.startswith(value):
                return False
        elif not str(getattr(v, field)).lower().startswith(value):
            return False
    return True


def sort_key(field: str) -> Any:  # a key function for sorted()
    order = {s: i for i, s in enumerate(sty.STATUS_STYLE)}

    def key(v: RunView) -> tuple[Any, ...]:
        if field == "variant":
            return (v.variant, runs.order_key(v.id))
        if field == "seed":
            return (v.seed if v.seed is not None else -1, runs.order_key(v.id))
        if field == "status":
            return (order.get(v.status, 99), runs.order_key(v.id))
        if field == "peak":
            return (v.peak if v.peak is not None else -1.0, runs.order_key(v.id))
        if field == "time":
            return (v.secs if v.secs is not None else -1.0, runs.order_key(v.id))
        if field == "verdict":
            return (v.verdict, runs.order_key(v.id))
        return runs.order_key(v.id)

    return key


def detail_text(v: RunView, feed: RunFeed | None) -> Text:
    """The line under the run table: the selected run's kind, variant, seed, status, progress and stop reason."""
    out = Text()
    out.append(f"{v.id} ", style="bold")
    seed = f" seed {v.seed}" if v.seed is not None else ""
    out.append_text(one_line(f"{v.kind or 'run'} {v.variant}{seed}  ", limit=80))
    out.append_text(sty.status_text(v.status))
    if feed is not None and feed.start is not None:
        if feed.kind == "train":
            out.append(f"  {pg.train_progress(feed).words()}")
        else:
            out.append(f"  {pg.pilot_progress(feed, v.status == 'running')}")
    if v.reason:
        out.append("  ")
        out.append_text(one_line(v.reason, style="dim", limit=400))
    return out
