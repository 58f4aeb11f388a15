"""``cockpit plan CAMPAIGN [--days 3,7,30] [--reserve-hours H] [--write]``: the rental plan."""

from __future__ import annotations

import argparse

from .. import notebook as nbm
from .. import plan as pl
from ..errors import UsageError


def int_list(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole days separated by commas, e.g. 3,7,30") from None
    if not out or any(d < 1 for d in out):
        raise argparse.ArgumentTypeError(f"{text!r}: give whole days >= 1, e.g. 3,7,30")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", nargs="?", default="campaigns/demo", help="campaign folder or campaign.toml")
    p.add_argument("--days", type=int_list, default=pl.DEFAULT_DAYS, help="package lengths in days (default 3,7,30)")
    p.add_argument("--seeds", type=int, default=pl.DEFAULT_SEEDS, help="seeds per variant (default 3: 0, 1, 2)")
    p.add_argument(
        "--reserve-hours",
        type=float,
        default=None,
        help="hours kept for evaluation and export (default: [rental] reserve_hours, else 10%% of the package)",
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs on the rented box: runs go side by side (default: as many as the reference's pilot saw)",
    )
    p.add_argument(
        "--boxes",
        type=int,
        default=1,
        metavar="N",
        help="N such boxes joined in a Ray cluster (`cockpit series --ray`): what they buy against one",
    )
    p.add_argument(
        "--updates",
        type=int,
        default=None,
        metavar="N",
        help="a probe campaign's run length in optimizer steps (the script's own, which Cockpit cannot read)",
    )
    p.add_argument("--write", action="store_true", help="store the chosen package in the notebook's [rental]")
    p.add_argument(
        "--choose",
        type=int,
        default=None,
        metavar="DAYS",
        help="the package --write stores (default: the smallest that holds every planned run)",
    )


def run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise UsageError("--seeds must be >= 1")
    if args.reserve_hours is not None and args.reserve_hours < 0:
        raise UsageError("--reserve-hours must be >= 0")
    nb = nbm.load(args.campaign)
    if args.gpus is not None and args.gpus < 1:
        raise UsageError(f"--gpus {args.gpus}: give a whole number >= 1")
    if args.updates is not None:
        if not nb.is_probe:
            raise UsageError(
                f"--updates is for a probe campaign (a script's own length); {nb.path}'s runs take their length "
                "from [batch] updates, epochs or examples: change it there"
            )
        if args.updates < 1:
            raise UsageError(f"--updates {args.updates}: give the script's optimizer steps, a whole number >= 1")
    if args.boxes < 1:
        raise UsageError(f"--boxes {args.boxes}: give a whole number >= 1")
    p = pl.build(
        nb,
        days=args.days,
        seeds=args.seeds,
        reserve_hours=args.reserve_hours,
        gpus=args.gpus,
        updates=args.updates,
        boxes=args.boxes,
    )
    from ..termout import console, print_lines

    out = console()
    print_lines(out, pl.render(p))
    if args.boxes > 1:
        one = pl.build(
            nb, days=args.days, seeds=args.seeds, reserve_hours=args.reserve_hours, gpus=args.gpus, updates=args.updates
        )
        print()
        print_lines(out, pl.boxes_against_one(p, one))
    if args.write:
        pkg = pl.choose(p, args.choose)
        if pkg is None:
            raise UsageError(
                f"--choose {args.choose}: not one of the packages planned ({', '.join(str(d) for d in args.days)} days)"
            )
        rental = pl.rental_of(p, pkg)

        def store(fresh: nbm.Notebook) -> None:
            rental.notes = fresh.rental.notes
            fresh.rental = rental

        nbm.mutate(nbm.find(args.campaign), store)
        print(f"\nthe {pkg.days}-day package is written to [rental] of {nb.path}")
    return 0
