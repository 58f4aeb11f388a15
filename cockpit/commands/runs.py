"""``cockpit runs CAMPAIGN``: every run of a campaign, failed and crashed ones included."""

from __future__ import annotations

import argparse
import dataclasses
import json

from .. import notebook as nbm
from .. import runs
from ..styles import STATUS_STYLE


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", nargs="?", default="campaigns/demo", help="campaign folder or campaign.toml")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def run(args: argparse.Namespace) -> int:
    nb = nbm.load(args.campaign)
    rows = runs.view(nb)  # each unfinished row as its folder says now (a killed run: crashed); nothing is written
    nodes = _nodes(nb, [r.id for r in rows])  # the runs a Ray series placed on another node: which
    if args.json:
        print(
            json.dumps(
                [{**dataclasses.asdict(r), **({"node": nodes[r.id]} if r.id in nodes else {})} for r in rows], indent=2
            )
        )
        return 0
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    # Ids, variants and stop reasons come from the notebook and from the task's exceptions: every one is
    # escaped (or Text), so it is shown as written and never read as Rich markup.
    from ..termout import console as make_console
    from ..termout import print_table

    console = make_console()
    wide = console.width >= 130
    tab = Table(
        title=Text(f"{nb.campaign.name}: {len(rows)} run{'s' if len(rows) != 1 else ''}"),
        pad_edge=False,
        box=box.SIMPLE_HEAD,
    )

    for col in ("run", "variant", "seed", "kind", "status", "phase", "peak MiB", "time s", "follows"):
        tab.add_column(col, justify="right" if col in ("seed", "peak MiB", "time s") else "left")
    if nodes:
        tab.add_column("node")
    if wide:
        tab.add_column("stop reason", overflow="fold")
    for r in rows:
        style = STATUS_STYLE.get(r.status, "")
        cells = [
            escape(r.id),
            escape(r.variant),
            str(r.seed),
            escape(r.kind),
            f"[{style}]{escape(r.status)}[/]" if style else escape(r.status),
            escape(r.phase),
            _num(r.peak_mib, "{:,.0f}"),
            _num(r.duration_s, "{:.1f}"),
            escape(r.follows),
            *([escape(nodes.get(r.id, ""))] if nodes else []),
        ]
        tab.add_row(*cells, *([escape(r.stop_reason)] if wide else []))
    # ids, variants, statuses and numbers stay whole; at 80 columns these go first, the least needed first
    print_table(console, tab, drop=["follows", "kind", "time s", "phase", "seed", *(["node"] if nodes else [])])
    if not wide:
        for r in rows:
            if r.stop_reason:
                line = Text.assemble((r.id, "bold"), " ", (r.status, STATUS_STYLE.get(r.status, "")), ": ")
                line.append(r.stop_reason)
                console.print(line, highlight=False)
    if not rows:
        print(f"no runs yet: start one with `cockpit pilot {nbm.find(args.campaign).parent}`")
    return 0


def _num(x: float | None, fmt: str) -> str:
    return "" if x is None else fmt.format(x)


def _nodes(nb: nbm.Notebook, ids: list[str]) -> dict[str, str]:
    """Where each run of a Ray series ran: its node's hostname and id, from its remote.json (none for a local run)."""
    out: dict[str, str] = {}
    for rid in ids:
        try:
            info = runs.remote_info(runs.run_dir(nb.directory, rid))
        except runs.BadRunId:
            continue
        if info is not None:
            out[rid] = f"{info.get('hostname', '?')} ({str(info.get('node_id', ''))[:12] or 'not placed yet'})"
    return out
