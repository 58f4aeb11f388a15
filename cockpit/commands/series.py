"""``cockpit series CAMPAIGN``: train variants x seeds at the fixed budget, each a new detached run.

Runs start one after another (or ``--parallel N`` at a time); each is a
``train`` run with its own id under ``runs/``. A variant x seed that already
has a run gets a new one that follows it. The command waits and prints one line
per validation and per finished run, then the summary; the runs themselves are
detached, so an interrupted series leaves them running (``cockpit stop``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import cluster, launch, machine, runs
from .. import notebook as nbm
from .. import series as sr
from ..errors import UsageError
from ..notebook.settings import SettingValue
from .pilot import parse_overrides


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", nargs="?", default="campaigns/demo", help="campaign folder or campaign.toml")
    p.add_argument("--variants", help="comma-separated variant ids (default: every quality variant)")
    p.add_argument("--seeds", default=None, help="seeds, e.g. 0,1,2 or 0-4 (default 0,1,2)")
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="runs at once (default 1); refused when the pilots' measured peaks say they do not fit",
    )
    p.add_argument(
        "--updates",
        type=int,
        default=None,
        metavar="N",
        help="a quick look: N updates instead of the notebook's budget (recorded in each run's params; "
        "compare keeps such runs apart)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a parameter for these runs only (recorded in each run's params)",
    )
    p.add_argument(
        "--rerun",
        action="append",
        default=[],
        metavar="RUN_ID",
        help="run again the variant and seed of RUN_ID as a new run that follows it (repeatable)",
    )
    p.add_argument(
        "--skip-done",
        action="store_true",
        help="leave out a variant x seed whose latest run completed with the same settings, or is still running "
        "(a series whose own process ended leaves its runs going on)",
    )
    p.add_argument(
        "--resume",
        nargs="*",
        metavar="RUN_ID",
        default=None,
        help="go on with stopped or crashed training runs from their newest checkpoint, as the same runs "
        "(default: every such run of the campaign)",
    )
    p.add_argument(
        "--without-pilot",
        metavar="REASON",
        default=None,
        help="start variants that have no passed pilot of these settings and task code anyway; the reason is "
        "recorded as a decision and in each run's row",
    )
    p.add_argument(
        "--again",
        metavar="REASON",
        default=None,
        help="run a configuration that already diverged, failed or ran out of memory once more (recorded)",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="spread the runs over the nodes of a Ray cluster (the head's HOST:PORT, or auto for RAY_ADDRESS; "
        "default: the notebook's [cluster] ray); each run asks Ray for what its pilot measured "
        "(needs `pip install 'cockpit[ray]'`, docs/ray.md)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and start nothing")
    p.add_argument(
        "--detach",
        action="store_true",
        help="run the series itself in the background (log in runs/.series-*.log) and return",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _variants(text: str | None) -> list[str] | None:
    if not text:
        return None
    out = [v.strip() for v in text.split(",") if v.strip()]
    if not out:
        raise UsageError("--variants: give variant ids separated by commas")
    return out


class Terminated(Exception):
    """SIGTERM reached the series' sequencer (its own process, not its runs)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def run(args: argparse.Namespace) -> int:
    for rid in args.rerun:
        try:
            runs.check_id(rid)
        except runs.BadRunId as exc:
            raise UsageError(f"--rerun: {exc}") from None
    path = nbm.find(args.campaign)
    nb = runs.settle(path)
    nb.needs_task("a series")
    overrides: dict[str, SettingValue] = {**parse_overrides(args.set), **sr.budget_overrides(args.updates)}
    seeds = sr.parse_seeds(args.seeds) if args.seeds is not None else None
    # A series on Ray whose own process ended (its SSH session closed) left its runs with their keeper on the
    # cluster: the same command again follows the ones still held instead of training them twice.
    held = _held(path) if cluster.address(nb, getattr(args, "ray", None)) is not None else []
    if args.resume is not None:
        named = set(args.resume)
        follow = [h for h in held if not named or h.attach in named]
        ids = [rid for rid in args.resume if rid not in {h.attach for h in follow}]
        items = sr.resumable(nb, ids) if ids or not named else []
        for h in follow:
            print(
                f"{h.attach} is still running on the Ray cluster, held by {_keeper_of(path, h)}: followed",
                file=sys.stderr,
            )
        if not items and not follow:
            print(
                f"nothing to resume: no stopped or crashed training run of {path.parent} has a checkpoint",
                file=sys.stderr,
            )
            return 0
        return _go(path, args, [*follow, *items], [])
    items, notes = sr.plan(
        nb, _variants(args.variants), seeds, overrides=overrides, skip_done=args.skip_done, rerun=args.rerun
    )
    follow = []
    for h in held:
        if any((i.variant, i.seed) == (h.variant, h.seed) for i in items):
            items = [i for i in items if (i.variant, i.seed) != (h.variant, h.seed)]
            follow.append(h)
            notes.append(
                f"{h.variant} seed {h.seed}: {h.attach} is still running on the Ray cluster, held by "
                f"{_keeper_of(path, h)}: followed, not started again"
            )
    decisions = (
        sr.guard(nb, items, without_pilot=args.without_pilot, again=args.again, parallel=args.parallel) if items else []
    )
    for n in notes:
        print(n, file=sys.stderr)
    if not items and not follow:
        print("nothing to run", file=sys.stderr)
        return 0
    return _go(path, args, [*follow, *items], [], decisions)


def _held(path: Path) -> list[sr.Item]:
    """The campaign's runs an earlier series' keeper still holds on the cluster, as items to follow."""
    out = []
    for rdir in cluster.held_runs(path):
        meta = runs.run_meta(rdir)
        seed = meta.get("seed")
        out.append(sr.Item(str(meta.get("variant", "")), int(seed) if isinstance(seed, int) else 0, attach=rdir.name))
    return out


def _keeper_of(path: Path, item: sr.Item) -> str:
    info = runs.remote_info(runs.run_dir(path.parent, item.attach)) or {}
    return f"the series keeper {info.get('keeper') or '?'}"


def _go(
    path: Path, args: argparse.Namespace, items: list[sr.Item], notes: list[str], decisions: list[str] | None = None
) -> int:
    """Show the plan, then run it (or only show it, or hand it to a detached sequencer)."""
    out = sys.stderr
    for n in notes:
        print(n, file=out)
    from .. import gpus as gpus_

    nb = nbm.load(path)
    nproc = launch.nproc_for(nb)
    address = cluster.address(nb, getattr(args, "ray", None))
    demands: dict[str, cluster.Demand] = {}
    fresh = [i for i in items if not i.attach]  # what this series starts (the others it follows)
    if address is not None:
        box: list[gpus_.Gpu] = []  # Ray places the runs: this box's GPUs are not the series'
        per_gpu = 1
    if address is not None and fresh:
        cluster.need_ray()
        demands = _demands(nb, path, fresh, nproc)
        print(f"on the Ray cluster at {address}, each run asking Ray for what its pilot measured:", file=out)
        for vid, d in demands.items():
            print(f"  {vid}: {d.label()} ({d.why})", file=out)
    else:
        box = gpus_.visible()
        notes, per_gpu = sr.fit_parallel(path, [i.variant for i in items], args.parallel, nproc, box)
        for n in notes:
            print(n, file=out)
    budget = (
        f"{args.updates} updates (--updates: a quick look, not the notebook's budget)"
        if args.updates
        else "the notebook's budget"
    )
    at_once = "every run submitted at once, Ray starts each" if address is not None else f"{args.parallel} at a time"
    print(f"series of {len(items)} runs on {path.parent}, {budget}, {at_once}:", file=out)
    for i in items:
        print(f"  {i.label()}", file=out)
    held = None
    if address is not None and fresh:
        from ..cluster import nodes, onray

        all_runs = runs.campaign_runs(path.parent)
        one = sr.disk_for_series(nb, all_runs, fresh, 1)
        node_disk = (
            nodes.NodeDisk(one.checkpoint, one.export, one.keep, one.source) if one.checkpoint is not None else None
        )
        # refuses here when a variant fits on no usable node
        storage = nb.cluster.storage if nb.cluster is not None else ""
        held = onray.Cluster(path, address, dict(demands), node_disk, storage=storage)
        for n in held.notes:
            print(n, file=out)
        print(f"{len(held.usable)} node{'s' if len(held.usable) != 1 else ''} of the cluster used", file=out)
        head = sr.disk_for_series(nb, all_runs, fresh, max(1, min(held.lanes, len(fresh))))
        where = "the head's disk, where every run's checkpoints and export come back"
        if held.storage is not None:  # the periodic checkpoints go to the storage: count them there
            head = dataclasses.replace(head, where=str(held.storage), free=machine.free_bytes(held.storage))
            where = "[cluster] storage, where every run's periodic checkpoints go"
        if not head.fits:  # as many runs at once as the cluster holds
            held.close()
            raise UsageError(
                f"--ray: the series does not start: {where}, with {held.lanes} run"
                f"{'s' if held.lanes != 1 else ''} at once on the cluster: {head.words()}"
            )
        if held.storage is not None:
            print(f"each run's periodic checkpoints go to [cluster] storage {held.storage}, not to the head", file=out)
    if args.dry_run:
        if held is not None:
            held.close()
        if args.json:
            print(json.dumps([i.__dict__ for i in items], indent=2, default=str))
        return 0
    if args.detach:
        if held is not None:
            held.close()
        return _detach(path, args)
    sr.record_decisions(path, decisions or [])

    if address is not None:
        series = sr.Series(
            path,
            items,
            parallel=len(items),  # every run is submitted at once; Ray starts each when a node has what it asks
            starter=held.new_run if held is not None else None,
            resumer=held.resume_run if held is not None else None,
            pump=held.pump if held is not None else (lambda: None),
            nproc=nproc,
        )
    else:
        placement = gpus_.Placement(box, per_gpu) if box else None
        series = sr.Series(path, items, parallel=args.parallel, placement=placement, nproc=nproc)
    t0 = time.monotonic()

    def on_change(what: str, s: sr.Started) -> None:
        el = time.monotonic() - t0
        if what == "started":
            gpu = f" on GPU {','.join(map(str, s.gpus))}" if s.gpus else (" on the Ray cluster" if held else "")
            print(f"{el:7.1f}s {s.run_id} started: {s.item.label()}{gpu} in {s.dir}", file=out, flush=True)
        elif what == "attached":
            print(f"{el:7.1f}s {s.run_id} followed: {s.item.label()} in {s.dir}", file=out, flush=True)
        else:
            st = s.state or runs.state(s.dir)
            print(
                f"{el:7.1f}s {s.run_id} {st.status}: {st.stop_reason} "
                + (f"({st.duration_s:.1f} s)" if st.duration_s is not None else "(duration unknown)"),
                file=out,
                flush=True,
            )

    def on_progress(s: sr.Started, e: Mapping[str, object]) -> None:  # an eval event (schema.Event) as it lands
        if e.get("kind") == "eval" and e.get("rank") in (None, 0):
            loss = e.get("loss")
            metrics = e.get("metrics")
            shown_metrics = metrics.items() if isinstance(metrics, Mapping) else ()
            extra = " ".join(f"{k} {v:.3g}" for k, v in shown_metrics if v is not None)
            shown = f"{loss:.4f}" if loss is not None else "non-finite"
            print(
                f"{time.monotonic() - t0:7.1f}s {s.run_id} {s.item.variant} seed {s.item.seed}: "
                f"update {e.get('step')} val_loss {shown} {extra}".rstrip(),
                file=out,
                flush=True,
            )

    # SIGTERM (a `kill`, the end of a detached series' session) ends the sequencer like Ctrl-C: it says which
    # runs go on (they are detached) and which it did not start, instead of vanishing without a word.
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        started = series.run(on_change, on_progress)
    except (KeyboardInterrupt, Terminated) as exc:
        alive = [s.run_id for s in series.active]
        left = [i.label() for i in series.pending]
        how = "stopped by SIGTERM" if isinstance(exc, Terminated) else "interrupted"
        if address is not None:  # the runs' keeper on the cluster holds them, not this process
            if held is not None:
                held.close()
            keepers = sorted({str((runs.remote_info(s.dir) or {}).get("keeper") or "?") for s in series.active})
            print(
                f"\nseries {how}: {', '.join(alive) or 'no run'} still running on the Ray cluster, held by "
                f"{', '.join(keepers) or 'no keeper'} (`cockpit stop {path.parent} RUN` to stop one; the same "
                f"`cockpit series ... --ray {address}` again follows them); not started ({len(left)}): "
                f"{', '.join(left) or 'none'}",
                file=out,
                flush=True,
            )
            return 143 if isinstance(exc, Terminated) else 130
        print(
            f"\nseries {how}: {', '.join(alive) or 'no run'} still running detached "
            f"(`cockpit stop {path.parent} RUN` to stop); not started ({len(left)}): {', '.join(left) or 'none'}",
            file=out,
            flush=True,
        )
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if held is not None:
        held.close()
    results = [sr.result(s) for s in started]
    wall = time.monotonic() - t0
    if args.json:
        print(json.dumps({"runs": results, "wall_s": wall}, indent=2, default=str))
    else:
        print_results(results, wall, path)
    bad = [r for r in results if r["status"] != "completed"]
    if not bad:
        return 0
    return int(runs.state(Path(bad[0]["dir"])).exit_code)


def _demands(nb: nbm.Notebook, path: Path, items: list[sr.Item], nproc: int) -> dict[str, cluster.Demand]:
    """What a run of each variant asks Ray for, from the pilot that vouches for it (the guard's)."""
    all_runs = runs.campaign_runs(path.parent)
    out: dict[str, cluster.Demand] = {}
    for vid in dict.fromkeys(i.variant for i in items):
        pilot = runs.latest_passed_pilot(all_runs, vid)
        if pilot is None:
            pilot, _ = sr.pilot_for(nb, all_runs, vid, sr.intended_params(nb, vid, {}))
        out[vid] = cluster.demand(pilot, nproc)
    return out


def print_results(results: Sequence[Mapping[str, object]], wall: float, path: Path) -> None:
    """The series' table: one row per run, as :func:`cockpit.series.result` made it."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"series: {len(results)} runs in {wall:.0f} s", title_justify="left", box=box.SIMPLE_HEAD)
    show_follows = any(r["follows"] for r in results)
    cols = [
        "run",
        "variant",
        "seed",
        *(["follows"] if show_follows else []),
        "status",
        "updates",
        "val_loss",
        "s/upd",
        "time",
    ]
    for col in cols:
        t.add_column(col, justify="right" if col in ("seed", "updates", "val_loss", "s/upd", "time") else "left")
    for r in results:
        style = "green" if r["status"] == "completed" else "red"
        upd = f"{r['updates']}/{r['planned_updates']}" if r["updates"] is not None else ""
        cells: list[str | Text] = [
            escape(str(r["run"])),
            escape(str(r["variant"])),
            str(r["seed"]),
            *([escape(str(r["follows"] or ""))] if show_follows else []),
            f"[{style}]{escape(str(r['status']))}[/]",
            upd,
            "" if r["final_val_loss"] is None else f"{r['final_val_loss']:.4f}",
            "" if r["step_time_s"] is None else f"{r['step_time_s']:.3f}",
            "" if r["duration_s"] is None else f"{r['duration_s']:.0f}s",
        ]
        t.add_row(*cells)
    from ..termout import console, print_table

    c = console()
    # ids, variants and numbers stay whole (at 80 columns Rich cut every run id to "r00…"): columns go instead
    print_table(c, t, drop=["follows", "time", "s/upd", "updates", "seed"])
    for r in results:
        c.print(
            Text(f"{r['run']} {r['status']}: {r['stop_reason']}", style="" if r["status"] == "completed" else "red"),
            highlight=False,
        )
    c.print(
        f"every run keeps its folder (curve.csv, evals.csv, predictions.jsonl, metrics.json); "
        f"compare variants across seeds with `cockpit compare {path.parent}`",
        style="dim",
        highlight=False,
    )


def _detach(path: Path, args: argparse.Namespace) -> int:
    proc, log_path = sr.in_background(path.parent, _rebuild(args))
    msg = {"pid": proc.pid, "log": str(log_path)}
    print(json.dumps(msg) if args.json else f"series running in the background (pid {proc.pid}); log {log_path}")
    return 0


def _rebuild(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    if args.variants:
        out += ["--variants", args.variants]
    if args.seeds is not None:
        out += ["--seeds", args.seeds]
    out += ["--parallel", str(args.parallel)]
    if args.updates is not None:
        out += ["--updates", str(args.updates)]
    for s in args.set:
        out += ["--set", s]
    for r in args.rerun:
        out += ["--rerun", r]
    if args.resume is not None:
        out += ["--resume", *args.resume]
    if args.skip_done:
        out.append("--skip-done")
    if args.without_pilot is not None:
        out += ["--without-pilot", args.without_pilot]
    if args.again is not None:
        out += ["--again", args.again]
    if getattr(args, "ray", None) is not None:
        out += ["--ray", args.ray]
    return out
