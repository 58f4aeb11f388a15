"""``cockpit report CAMPAIGN``: write campaigns/<c>/report/report.md, the readable conclusion, its SVG pictures
and report.html."""

from __future__ import annotations

import argparse

from .. import plan as pl
from .. import report as rp
from .plan import int_list


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", nargs="?", default="campaigns/demo", help="campaign folder or campaign.toml")
    p.add_argument("--days", type=int_list, default=pl.DEFAULT_DAYS, help="rental packages in days (default 3,7,30)")
    p.add_argument("--seeds", type=int, default=pl.DEFAULT_SEEDS, help="seeds per variant in the plan (default 3)")
    p.add_argument("--print", action="store_true", help="also print the report")


def run(args: argparse.Namespace) -> int:
    target = rp.write(args.campaign, days=args.days, seeds=args.seeds)
    if args.print:
        from ..termout import console, print_lines

        # prose wrapped, tables fitted to the terminal; report.md itself keeps every column
        print_lines(console(), target.read_text("utf-8").splitlines(), drop_note=f"read {target}")
    pictures = sorted(target.parent.glob("*.svg"))
    extra = f" and {len(pictures)} SVG picture{'s' if len(pictures) != 1 else ''}" if pictures else ""
    print(f"report written to {target}")
    print(f"beside it: {rp.HTML_FILE} (one page to send){extra}")
    return 0
