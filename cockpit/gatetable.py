"""Gate rows as plain values, and the rich table the CLI prints. No torch, no textual.

One row per gate event (and per rank in a distributed run): phase, its input
parameters, torch allocated / reserved / peak, NVML used, RSS, duration,
verdict and remedy. A counter that was not measured shows as "absent"; a column
no row measured (the GPU counters on a CPU box) is left out and said once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard, TypeVar

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .schema import Check
from .styles import VERDICT_STYLE


def mib(b: object) -> str:
    if b is None:
        return "absent"
    if isinstance(b, bool) or not isinstance(b, (int, float)):
        return "?"  # not a figure Cockpit wrote
    return f"{b / 2**20:,.0f}"


def short_inputs(inputs: Mapping[str, object], limit: int = 100) -> str:
    parts = []
    for k, v in inputs.items():
        if k == "ids":
            continue
        if isinstance(v, list):
            v = f"{min(v)}..{max(v)}" if v and all(isinstance(x, (int, float)) for x in v) else f"[{len(v)}]"
        parts.append(f"{k}={v}")
    s = " ".join(parts)
    return s if len(s) <= limit else s[: limit - 1] + "…"


Gate = Mapping[str, object]  # a gate event as read from events.jsonl: every field checked before use
G = TypeVar("G", bound=Gate)


@dataclass(frozen=True)
class GateRow:
    """A gate event as plain values (`cockpit pilot --json` prints these fields, in this order)."""

    phase: str
    rank: object  # as written: an int for a distributed run, else None
    inputs: str  # short form (:func:`short_inputs`)
    allocated: object  # torch counters, bytes: None where not measured (absent)
    reserved: object
    peak_allocated: object
    peak_reserved: object
    nvml_used: list[object] | None  # per GPU
    rss: object
    rss_peak: object
    duration_s: float | None
    busy: str
    verdict: str
    remedy: str
    message: str
    checks: list[Check]  # as written by the gate (name, ok, detail, warn, na)


def _is_check(value: object) -> TypeGuard[Check]:
    """A check as a gate writes it (a file Cockpit did not write may hold anything in its list)."""
    return isinstance(value, dict)


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def row(gate: Gate) -> GateRow:
    """A gate event as plain values; a field missing or of the wrong type (a file Cockpit did not write) shows as absent."""
    mem = _mapping(gate.get("mem"))
    t = mem["torch"] if isinstance(mem.get("torch"), dict) else None
    torch_counters = _mapping(t)
    nv = mem.get("nvml")
    checks = gate.get("checks")
    duration = gate.get("duration_s")
    return GateRow(
        phase=str(gate.get("phase", "?")),
        rank=gate.get("rank"),
        inputs=short_inputs(_mapping(gate.get("inputs"))),
        allocated=torch_counters.get("allocated") if t else None,
        reserved=torch_counters.get("reserved") if t else None,
        peak_allocated=torch_counters.get("peak_allocated") if t else None,
        peak_reserved=torch_counters.get("peak_reserved") if t else None,
        nvml_used=[g.get("used") for g in nv if isinstance(g, dict)] if isinstance(nv, list) and nv else None,
        rss=mem.get("rss"),
        rss_peak=mem.get("rss_peak"),
        duration_s=duration if isinstance(duration, (int, float)) else None,
        busy=str(gate.get("busy") or ""),
        verdict=str(gate.get("verdict", "?")),
        remedy=str(gate.get("remedy") or ""),
        message=str(gate.get("message") or ""),
        checks=[c for c in checks if _is_check(c)] if isinstance(checks, list) else [],
    )


def detail(r: GateRow) -> str:
    """For a failed or warned gate: what went wrong, then what to do."""
    if r.verdict not in ("fail", "warn"):
        return ""
    bad = [c for c in r.checks if not c.get("ok")]
    msg = r.message or "; ".join(f"{c.get('name')}: {c.get('detail')}" for c in bad)
    return f"{msg} -> {r.remedy}" if r.remedy else msg


def by_phase(gates: Sequence[G]) -> list[G]:
    """Ranks side by side: gates in phase order, then by rank (arrival order otherwise)."""
    from .events import PHASES

    order = {p: i for i, p in enumerate(PHASES)}
    return sorted(gates, key=lambda g: (order.get(str(g.get("phase")), len(order)), g.get("rank") or 0))


COUNTERS = (  # column header, the row's field, what it counts
    ("alloc MiB", "allocated", "torch allocated"),
    ("resv MiB", "reserved", "torch reserved"),
    ("peak MiB", "peak_reserved", "torch peak"),
    ("NVML MiB", "nvml_used", "NVML"),
)


def measured(rows: list[GateRow]) -> list[str]:
    """The GPU counters some row has a figure for: a column where every row says "absent" is left out."""
    return [field for _, field, _ in COUNTERS if any(getattr(r, field) is not None for r in rows)]


def table(gates: Sequence[Gate], title: str = "", wide: bool = True) -> Table:
    """The gate table. ``wide=False`` leaves inputs and remedies out of the columns (for an 80-column
    terminal: :func:`findings` prints what failed or warned, one line each); a GPU counter no row measured
    is left out either way (:func:`absent_words` says so once)."""
    gates = by_phase(gates)
    rows = [row(g) for g in gates]
    from rich import box

    tab = Table(
        title=Text(title) if title else None,
        show_lines=False,
        expand=False,
        pad_edge=False,
        show_edge=False,
        box=box.SIMPLE_HEAD,
    )
    ranks = any(r.rank is not None for r in rows)
    have = measured(rows)
    tab.add_column("phase", no_wrap=True)
    if ranks:
        tab.add_column("rank", justify="right")
    if wide:
        tab.add_column("inputs", overflow="fold", max_width=32)
    for header, field, _ in COUNTERS:
        if field in have:
            tab.add_column(header, justify="right", no_wrap=True)
    tab.add_column("RSS MiB", justify="right", no_wrap=True)
    tab.add_column("time s", justify="right", no_wrap=True)
    tab.add_column("verdict", no_wrap=True)
    if wide:
        tab.add_column("remedy / detail", overflow="fold", max_width=48)
    for r in rows:
        figures = {
            "allocated": mib(r.allocated),
            "reserved": mib(r.reserved),
            # the one rule for the peak (cockpit.runs): torch's peak reserved on a GPU
            "peak_reserved": mib(r.peak_reserved),
            "nvml_used": "absent" if r.nvml_used is None else "/".join(mib(x) for x in r.nvml_used),
        }
        verdict = Text(r.verdict, style=VERDICT_STYLE.get(r.verdict, ""))
        cells: list[str | Text] = [escape(r.phase)]  # text from the events: shown as written, never as markup
        if ranks:
            cells.append("" if r.rank is None else escape(str(r.rank)))
        if wide:
            cells.append(escape(r.inputs))
        cells += [figures[f] for f in have]
        cells += [
            mib(r.rss),
            ("" if r.duration_s is None else f"{r.duration_s:.2f}")
            + ("[yellow]*[/]" if r.busy else ""),  # busy_words below says how busy, once
            verdict,
        ]
        if wide:
            cells.append(escape(detail(r)))
        tab.add_row(*cells)
    return tab


def absent_words(gates: Sequence[Gate]) -> str:
    """One sentence for the counters no row measured ("" when every one has a figure)."""
    have = measured([row(g) for g in gates])
    missing = [what for _, field, what in COUNTERS if field not in have]
    if not missing:
        return ""
    if len(missing) == len(COUNTERS):
        return "GPU counters (torch, NVML) absent on this machine"
    return f"absent on this machine: {', '.join(missing)}"


def busy_words(gates: Sequence[Gate]) -> str:
    """The phases timed on a busy machine, said once: "load up to 8.7 on 2 CPUs during all 14 phases"."""
    rows = by_phase(gates)
    busy = [g for g in rows if g.get("busy")]
    if not busy:
        return ""
    machines = [_mapping(g.get("machine")) for g in busy]
    loads = [v for m in machines if isinstance(v := m.get("load1"), (int, float))]
    cpus = {m.get("cpus") for m in machines if m} - {None}
    if loads and len(cpus) == 1:
        (n,) = cpus
        how = f"load {'up to ' if len(set(loads)) > 1 else ''}{max(loads):.1f} on {n:g} CPUs"
    else:  # a file written before the load was kept: its own words
        how = str(busy[0]["busy"])
    names = sorted({str(g.get("phase")) for g in busy}, key=[str(g.get("phase")) for g in rows].index)
    where = f"all {len(names)} phases" if len(busy) == len(rows) else ", ".join(names)
    return f"* {how} during {where}: times from a busy machine"


def findings(gates: Sequence[Gate]) -> list[Text]:
    """One line per finding: each failed or warned check, each gate that measured nothing (n/a)."""
    out = []
    for g in by_phase(gates):
        r = row(g)
        verdict = r.verdict
        if verdict not in ("fail", "warn", "n/a", "skipped"):
            continue
        where = r.phase + (f"[{r.rank}]" if r.rank is not None else "")
        if verdict in ("n/a", "skipped"):  # the reason it measured nothing (a probe's skipped or never-reached row)
            style = VERDICT_STYLE[verdict]
            why = (
                (r.message if verdict == "skipped" else "")
                or "; ".join(str(c.get("detail")) for c in r.checks)
                or r.message
                or "measured nothing"
            )
            out.append(
                Text.assemble((f"{'skip' if verdict == 'skipped' else 'n/a '} ", style), (where, "bold"), f": {why}")
            )
            continue
        bad = [c for c in r.checks if not c.get("ok")]
        if not bad:
            bad = [{"name": "", "ok": False, "detail": r.message or "(no check named)", "warn": verdict == "warn"}]
        for i, c in enumerate(bad):
            said = "warn" if c.get("warn") else "fail"
            text = f"{c.get('name')}: {c.get('detail')}" if c.get("name") else str(c.get("detail"))
            tail = f" -> {r.remedy}" if r.remedy and i == len(bad) - 1 else ""
            out.append(Text.assemble((f"{said} ", VERDICT_STYLE[said]), (where, "bold"), f": {text}{tail}"))
    return out
