"""``cockpit compare CAMPAIGN``: quality across seeds per variant, and memory variants side by side.

Prints the quality table (n, mean, sample std, min, max and every seed's value,
with "not distinguishable" when a difference is within the seeds' spread), the
runs that did not complete with their reasons, and memory and time per phase
from each variant's latest passed pilot, with flags for a variant that changed
the experimental question. ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", nargs="?", default="campaigns/demo", help="campaign folder or campaign.toml")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run(args: argparse.Namespace) -> int:
    from .. import compare

    data = compare.collect(args.campaign)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    from ..termout import console

    compare.render(data, console())
    return 0
