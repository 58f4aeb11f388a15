"""``cockpit sheet CAMPAIGN [--variant V] [--write]``: the selection sheet from measured peaks."""

from __future__ import annotations

import argparse
import dataclasses
import json

from .. import notebook as nbm
from .. import sheet as sh


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", nargs="?", default="campaigns/demo", help="campaign folder or campaign.toml")
    p.add_argument("--variant", help="variant id (default: the reference)")
    p.add_argument("--write", action="store_true", help="store the sheet in the notebook's [selection]")
    p.add_argument("--json", action="store_true", help="print the sheet as JSON")


def run(args: argparse.Namespace) -> int:
    nb = nbm.load(args.campaign)
    s = sh.build(nb, args.variant)
    if args.json:
        print(json.dumps(dataclasses.asdict(s), indent=2, default=str))
    else:
        from ..termout import console, print_lines

        print_lines(console(), sh.render(s))
    if args.write:
        selection = sh.selection_of(s)

        def store(fresh: nbm.Notebook) -> None:
            fresh.selection = selection

        nbm.mutate(nbm.find(args.campaign), store)
        print(f"\nwritten to [selection] of {nb.path}")
    return 0
