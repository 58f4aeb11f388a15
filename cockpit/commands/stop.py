"""``cockpit stop CAMPAIGN RUN``: SIGTERM the run's process group, SIGKILL after a grace period."""

from __future__ import annotations

import argparse
import sys

from .. import launch, runs
from .. import notebook as nbm
from ..errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", help="campaign folder or campaign.toml")
    p.add_argument("run", help="run id, e.g. r0003")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")


def run(args: argparse.Namespace) -> int:
    path = nbm.find(args.campaign)
    try:
        rdir = runs.run_dir(path.parent, args.run)
    except runs.BadRunId as exc:
        raise UsageError(f"{exc}; `cockpit runs {path.parent}` lists the runs.") from None
    if rdir.is_symlink():
        raise UsageError(f"{rdir}: a symbolic link, not a run folder Cockpit made; nothing was signalled.")
    if not rdir.is_dir():
        raise UsageError(f"{rdir}: no such run folder; `cockpit runs {path.parent}` lists the runs.")
    what = launch.stop(rdir, grace_s=args.grace)  # a stop never depends on the notebook being readable
    print(f"{args.run}: {what}")
    try:
        runs.settle(path)
    except nbm.NotebookError as exc:
        print(f"cockpit stop: the notebook's row was not updated: {exc}", file=sys.stderr)
    return 0
