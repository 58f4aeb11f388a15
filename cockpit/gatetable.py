"""Gate rows as plain values, and the rich table the CLI prints. No torch, no textual.

One row per gate event (and per rank in a distributed run): phase, its input
parameters, torch allocated / reserved / peak, NVML used, RSS, duration,
verdict and remedy. GPU counters that were not measured show as "absent".
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

VERDICT_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skipped": "dim", "n/a": "dim"}


def mib(b: int | float | None) -> str:
    if b is None:
        return "absent"
    if isinstance(b, bool) or not isinstance(b, (int, float)):
        return "?"  # not a figure Cockpit wrote
    return f"{b / 2**20:,.0f}"


def short_inputs(inputs: dict[str, Any], limit: int = 100) -> str:
    parts = []
    for k, v in inputs.items():
        if k == "ids":
            continue
        if isinstance(v, list):
            v = f"{min(v)}..{max(v)}" if v and all(isinstance(x, (int, float)) for x in v) else f"[{len(v)}]"
        parts.append(f"{k}={v}")
    s = " ".join(parts)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def row(gate: dict[str, Any]) -> dict[str, Any]:
    """A gate event as plain values; a field missing or of the wrong type (a file Cockpit did not write) shows as absent."""
    mem: dict[str, Any] = gate["mem"] if isinstance(gate.get("mem"), dict) else {}
    t: dict[str, Any] | None = mem["torch"] if isinstance(mem.get("torch"), dict) else None
    nv: list[Any] | None = mem["nvml"] if isinstance(mem.get("nvml"), list) else None
    inputs: dict[str, Any] = gate["inputs"] if isinstance(gate.get("inputs"), dict) else {}
    return {
        "phase": str(gate.get("phase", "?")),
        "rank": gate.get("rank"),
        "inputs": short_inputs(inputs),
        "allocated": t.get("allocated") if t else None,
        "reserved": t.get("reserved") if t else None,
        "peak_allocated": t.get("peak_allocated") if t else None,
        "peak_reserved": t.get("peak_reserved") if t else None,
        "nvml_used": [g.get("used") for g in nv if isinstance(g, dict)] if nv else None,
        "rss": mem.get("rss"),
        "rss_peak": mem.get("rss_peak"),
        "duration_s": gate.get("duration_s") if isinstance(gate.get("duration_s"), (int, float)) else None,
        "busy": str(gate.get("busy") or ""),
        "verdict": str(gate.get("verdict", "?")),
        "remedy": str(gate.get("remedy") or ""),
        "message": str(gate.get("message") or ""),
        "checks": [c for c in gate.get("checks") or [] if isinstance(c, dict)]
        if isinstance(gate.get("checks"), list)
        else [],
    }


def detail(r: dict[str, Any]) -> str:
    """For a failed or warned gate: what went wrong, then what to do."""
    if r["verdict"] not in ("fail", "warn"):
        return ""
    bad = [c for c in r["checks"] if not c.get("ok")]
    msg = r["message"] or "; ".join(f"{c.get('name')}: {c.get('detail')}" for c in bad)
    return f"{msg} -> {r['remedy']}" if r["remedy"] else msg


def by_phase(gates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ranks side by side: gates in phase order, then by rank (arrival order otherwise)."""
    from .events import PHASES

    order = {p: i for i, p in enumerate(PHASES)}
    return sorted(gates, key=lambda g: (order.get(str(g.get("phase")), len(order)), g.get("rank") or 0))


def table(gates: list[dict[str, Any]], title: str = "", wide: bool = True) -> Table:
    """The gate table. ``wide=False`` leaves inputs and remedies out of the
    columns (for an 80-column terminal); print them with :func:`notes` below."""
    gates = by_phase(gates)
    from rich import box

    tab = Table(
        title=Text(title) if title else None, show_lines=False, expand=False, pad_edge=False, box=box.SIMPLE_HEAD
    )
    ranks = any(g.get("rank") is not None for g in gates)
    tab.add_column("phase", no_wrap=True)
    if ranks:
        tab.add_column("rank", justify="right")
    if wide:
        tab.add_column("inputs", overflow="fold", max_width=32)
    tab.add_column("alloc MiB", justify="right")
    tab.add_column("resv MiB", justify="right")
    tab.add_column("peak MiB", justify="right")
    tab.add_column("NVML MiB", justify="right")
    tab.add_column("RSS MiB", justify="right")
    tab.add_column("time s", justify="right")
    tab.add_column("verdict", no_wrap=True)
    if wide:
        tab.add_column("remedy / detail", overflow="fold", max_width=48)
    for g in gates:
        r = row(g)
        # the one rule for the peak (cockpit.runs): torch's peak reserved on a GPU
        peak = mib(r["peak_reserved"]) if r["peak_reserved"] is not None else "absent"
        nv = "absent" if r["nvml_used"] is None else "/".join(mib(x) for x in r["nvml_used"])
        verdict = Text(r["verdict"], style=VERDICT_STYLE.get(r["verdict"], ""))
        cells: list[str | Text] = [escape(r["phase"])]  # text from the events: shown as written, never as markup
        if ranks:
            cells.append("" if r["rank"] is None else escape(str(r["rank"])))
        if wide:
            cells.append(escape(r["inputs"]))
        cells += [
            mib(r["allocated"]),
            mib(r["reserved"]),
            peak,
            nv,
            mib(r["rss"]),
            ("" if r["duration_s"] is None else f"{r['duration_s']:.2f}")
            + ("[yellow]*[/]" if r["busy"] else ""),  # the notes say how busy
            verdict,
        ]
        if wide:
            cells.append(escape(detail(r)))
        tab.add_row(*cells)
    return tab


def notes(gates: list[dict[str, Any]]) -> list[Text]:
    """Inputs of every phase and the detail of every failed or warned gate, one line each."""
    out = []
    for g in by_phase(gates):
        r = row(g)
        rank = f"[{r['rank']}]" if r["rank"] is not None else ""
        line = Text(f"{r['phase']}{rank}: ", style="bold")
        reason = r["message"] if r["verdict"] in ("skipped", "n/a") else ""
        line.append(r["inputs"] or reason or "no inputs", style="dim")
        out.append(line)
        d = detail(r)
        if d:
            out.append(Text(f"  {r['verdict']}: {d}", style=VERDICT_STYLE.get(r["verdict"], "")))
        if r["busy"]:
            out.append(
                Text(
                    f"  * timed on a busy machine: {r['busy']}; its time says little about an idle one", style="yellow"
                )
            )
    return out
