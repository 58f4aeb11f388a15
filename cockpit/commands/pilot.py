"""``cockpit pilot CAMPAIGN``: start the pilot detached, follow its gates, print the table."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from .. import events as ev
from .. import launch, runs, styles
from ..errors import UsageError
from ..runs import TomlValue

if TYPE_CHECKING:
    from rich.console import Console


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", nargs="?", default="campaigns/demo", help="campaign folder or campaign.toml")
    p.add_argument("--variant", help="variant id (default: the reference)")
    p.add_argument(
        "--all",
        action="store_true",
        help="pilot every variant that needs its own pilot (variants that differ only in optimizer scalars such as "
        "the learning rate share one), one after another",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--nproc", type=int, default=None, help="processes per node (torchrun); default from the notebook's strategy"
    )
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--rdzv", default=None, help="rendezvous endpoint host:port for several nodes")
    p.add_argument("--follows", default="", help="the run this one restarts")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a parameter for this run only"
    )
    p.add_argument("--detach", action="store_true", help="start and return at once (follow later with `cockpit runs`)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--no-task-check",
        action="store_true",
        help="start at once, without first importing the task and sizing its splits in a child process",
    )


def parse_overrides(items: list[str]) -> dict[str, TomlValue]:
    """``--set KEY=VALUE`` as settings: each value read as TOML (a number, a boolean, a list...), else as text."""
    from ..notebook.parse import tomllib  # tomli on Python 3.10

    out: dict[str, TomlValue] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE, e.g. --set microbatch=1")
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value
    return out


def follow(rdir: Path, quiet: bool = False, poll_s: float = 0.1) -> runs.RunState:
    """Print each gate as it lands, until the process ends."""
    from rich.console import Console
    from rich.text import Text

    console = Console(stderr=True)
    tail = ev.Tail(rdir / ev.EVENTS_FILE)
    started = time.monotonic()
    while True:
        alive = runs.is_alive(rdir)
        for e in tail.read_new():
            if quiet:
                continue
            at = Text(f"{time.monotonic() - started:6.1f}s ", style="dim")
            if e["kind"] == ev.PHASE_START and e.get("rank") in (None, 0):
                console.print(at + Text(f"{e.get('phase')} …"), highlight=False)
            elif e["kind"] == ev.GATE:
                verdict = str(e.get("verdict"))
                style = styles.verdict_style(verdict)
                rank = f" rank {e['rank']}" if e.get("rank") is not None else ""
                took = e.get("duration_s")
                took_s = f"{took:.2f}" if isinstance(took, (int, float)) else "?"
                console.print(
                    at + Text.assemble(f"{e.get('phase')}{rank}: ", (verdict, style), f" ({took_s} s)"),
                    highlight=False,
                )
        if not alive:
            launch.reap()  # alive was read before this pass's events, so they are all printed
            break
        time.sleep(poll_s)
    st = runs.state(rdir)
    if st.run_end is None or st.status == ev.Status.CRASHED.value:
        # The run could not write its own row (killed, or a rank died): the follower gives it the final word.
        # A run that wrote its end wrote its row too (its last act), so the notebook is not read again here.
        runs.settle_run(rdir.parent.parent, rdir)
    return st


class PilotSummary(TypedDict):
    """What ``cockpit pilot --json`` prints of a finished pilot."""

    run: str
    dir: str
    status: str
    stop_reason: str
    phase: str | None
    peak_mib: float | None
    peak_counter: str
    duration_s: float | None
    exit_code: int
    gates: list[Mapping[str, object]]  # gatetable.GateRow's fields, with the gate's inputs and machine load in full
    findings: list[str]
    absent: str
    busy: str
    next: str


def summary(st: runs.RunState) -> PilotSummary:
    from ..gatetable import absent_words, busy_words, findings, row

    return {
        "run": st.id,
        "dir": str(st.dir),
        "status": st.status,
        "stop_reason": st.stop_reason,
        "phase": st.phase,
        "peak_mib": st.peak_mib,
        "peak_counter": st.peak_counter,
        "duration_s": st.duration_s,
        "exit_code": int(st.exit_code),
        "gates": [
            {**dataclasses.asdict(row(g)), "inputs_full": g.get("inputs"), "machine": g.get("machine")}
            for g in st.gates
        ],
        "findings": [t.plain for t in findings(st.gates)],
        "absent": absent_words(st.gates),
        "busy": busy_words(st.gates),
        "next": next_step(st),
    }


def shown_path(path: Path) -> str:
    """A path as the user would type it from here: relative to the current folder when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except (ValueError, OSError):
        return str(path)


# Gates whose failure is about the examples themselves: `cockpit inspect` shows the batch they used.
EXAMPLE_PHASES = frozenset({"data", "leakage", "forward", "backward", "overfit", "validation", "export"})


def next_step(st: runs.RunState, noun: str = "pilot", probe_campaign: bool = False) -> str:
    """What to run next, in one line: the series after a passed pilot; after a failure, the remedy first.

    A probe campaign (made by ``cockpit probe -- COMMAND``) has no task to pilot: its next steps are the sheet
    and the plan, which take their figures from the probe."""
    camp = shown_path(st.dir.parent.parent)
    if st.status == ev.Status.PASSED.value:
        if probe_campaign:
            return f"cockpit sheet {camp}, then cockpit plan {camp} --updates N (the script's own length)"
        if noun != "pilot":
            return f"cockpit pilot {camp} (the full pilot), then cockpit series {camp}"
        return f"cockpit series {camp}, then cockpit sheet {camp}"
    failed = [g for g in st.gates if g.get("verdict") == ev.Verdict.FAIL.value]
    steps = []
    if failed:
        remedy = str(failed[0].get("remedy") or "")
        if remedy:
            steps.append(remedy.rstrip("."))
        if str(failed[0].get("phase")) in EXAMPLE_PHASES and (st.dir / "inspect.json").is_file():
            steps.append(f"cockpit inspect {camp} {st.id} (the examples it used)")
    elif st.status in (ev.Status.CRASHED.value, ev.Status.ERROR.value):
        steps.append(f"read {shown_path(st.dir / 'output.log')}")
    steps.append(f"then cockpit {noun} {camp} again" if steps else f"cockpit {noun} {camp} again")
    return "; ".join(steps)


def print_result(
    st: runs.RunState,
    noun: str = "pilot",
    rss_of: str = "the pilot process",
    console: Console | None = None,
    probe_campaign: bool = False,
) -> None:
    """The end of a pilot: the gate table, one line per finding, what was not measured, the busy machine said
    once, the outcome and a `next:` line. At 80 columns the demo's 14 passed gates end in 22 lines;
    a terminal of 150 columns or more keeps the inputs and remedies as columns."""
    from rich.console import Console
    from rich.text import Text

    from ..gatetable import absent_words, busy_words, findings, table

    console = console or Console()
    wide = console.width >= 150
    console.print(table(st.gates, title=f"{noun} {st.id}: {st.status}", wide=wide))
    for line in findings(st.gates):
        console.print(line, overflow="fold", highlight=False)
    absent = absent_words(st.gates)
    console.print(f"RSS: {rss_of}" + (f"; {absent}" if absent else ""), style="dim", highlight=False, overflow="fold")
    busy = busy_words(st.gates)
    if busy:
        console.print(busy, style="yellow", highlight=False, overflow="fold")
    color = "green" if st.status == "passed" else "red"
    peak = f"{st.peak_mib:,.0f} MiB ({st.peak_counter})" if st.peak_mib is not None else "absent"
    reached = "" if st.status == ev.Status.PASSED.value else f"; phase reached: {st.phase}"
    console.print(
        Text.assemble(
            (st.status, color),
            (f" in {st.duration_s:.1f} s" if st.duration_s is not None else "")
            + f": {st.stop_reason}{reached}; peak {peak}",
        ),
        highlight=False,
        overflow="fold",
    )
    console.print(
        f"files in {shown_path(st.dir)} (events.jsonl: each phase's inputs and checks)",
        style="dim",
        highlight=False,
        overflow="fold",
    )
    console.print(
        Text.assemble(("next: ", "bold"), next_step(st, noun, probe_campaign)), highlight=False, overflow="fold"
    )


def run_all(args: argparse.Namespace) -> int:
    """One pilot per group of variants that a pilot vouches for together; groups already vouched for are skipped."""
    from .. import notebook as nbm
    from .. import prestart
    from ..series import checks
    from ..series.items import intended_params

    if args.variant or args.follows:
        raise UsageError("--all pilots every variant that needs it: leave out --variant and --follows")
    nb = nbm.load(args.campaign)
    nb.needs_task("a pilot")
    overrides = parse_overrides(args.set)
    groups = checks.pilot_groups(nb)
    if not args.no_task_check:
        prestart.refuse(nb, [g[0] for g in groups], overrides, prestart.NOTHING_STARTED)
    lines: list[str] = []
    worst = 0
    for group in groups:
        nb = nbm.load(args.campaign)
        head = group[0]
        done, _ = checks.pilot_for(nb, runs.campaign_runs(nb.directory), head, intended_params(nb, head, overrides))
        shared = f" (shared by {', '.join(group[1:])})" if group[1:] else ""
        if done is not None and not args.set:
            lines.append(f"{head}{shared}: already vouched for by passed pilot {done.id}")
            continue
        rid, rdir = launch.new_run(
            args.campaign, head, args.seed, overrides=overrides, nproc=args.nproc, nnodes=args.nnodes, rdzv=args.rdzv
        )
        print(f"pilot {rid} of {head}{shared} started in {rdir}", file=sys.stderr)
        st = follow(rdir, quiet=args.json)
        if not args.json:
            print_result(st)
        lines.append(f"{head}{shared}: pilot {rid} {st.status}")
        worst = worst or int(st.exit_code)
    if args.json:
        print(json.dumps({"groups": groups, "results": lines}, indent=2))
    else:
        print(f"\n{len(groups)} pilot(s) vouch for the {len(nb.variants)} variants of {nb.directory}:")
        for line in lines:
            print(f"  {line}")
        print("Variants that differ only in " + ", ".join(sorted(checks.SHARED_SCALARS)) + " share a pilot.")
    return worst


def run(args: argparse.Namespace) -> int:
    if getattr(args, "all", False):
        return run_all(args)
    if args.follows:
        try:
            runs.check_id(args.follows)
        except runs.BadRunId as exc:
            raise UsageError(f"--follows: {exc}") from None
    overrides = parse_overrides(args.set)
    if not args.no_task_check:
        from .. import prestart

        prestart.before_pilot(args.campaign, args.variant, overrides)
    rid, rdir = launch.new_run(
        args.campaign,
        args.variant,
        args.seed,
        follows=args.follows,
        overrides=overrides,
        nproc=args.nproc,
        nnodes=args.nnodes,
        rdzv=args.rdzv,
    )
    if args.detach:
        print(json.dumps({"run": rid, "dir": str(rdir)}) if args.json else f"started {rid} in {rdir}")
        return 0
    print(f"pilot {rid} started in {rdir} (detached: closing this terminal does not stop it)", file=sys.stderr)
    st = follow(rdir, quiet=args.json)
    if args.json:
        print(json.dumps(summary(st), indent=2, default=str))
    else:
        print_result(st)
    return int(st.exit_code)
