"""``cockpit estimate CAMPAIGN [--variant V] [--gpu NAME ...] [--json]``: GPU memory per pilot phase, predicted on
any machine by tracing the campaign's model and training step at full size on fake tensors (see
``cockpit.estimate``), and the largest microbatch that fits each GPU size."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", help="campaign folder or campaign.toml")
    p.add_argument("--variant", help="variant id (default: the reference)")
    p.add_argument(
        "--gpu",
        nargs="+",
        metavar="NAME",
        help="size the table for these GPUs (H100, A100-40, L4, ... or a size in GB); default: 16 to 141 GB",
    )
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument(
        "--no-table", action="store_true", help="trace the campaign's microbatch only (no largest-microbatch search)"
    )
    p.add_argument(
        "--no-compare", action="store_true", help="skip the trace with the CPU's semantics (the CPU semantics column)"
    )


def run(args: argparse.Namespace) -> int:
    from .. import estimates
    from .. import notebook as nbm
    from ..estimate import campaign, report
    from ..runs import now

    nb = nbm.load(args.campaign)
    nb.needs_task("an estimate (it traces the task's model)")
    e = campaign.estimate(nb, args.variant, args.gpu, second=not args.no_table, compare_cpu=not args.no_compare)
    data = dataclasses.asdict(e)
    try:
        saved = estimates.save(nb.directory, e.variant, data, now())
    except OSError as exc:
        saved = None
        print(f"cockpit estimate: not saved beside the campaign ({exc}); the sheet will not show it", file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        from ..termout import console, print_lines

        print_lines(console(), report.blocks(e))
        if saved is not None:
            print(f"Saved to {saved}: `cockpit sheet` shows it beside what a pilot on a GPU measures.")
    return 0
