"""``cockpit [tui] [CAMPAIGN]``: open the live cockpit (the default command).

Without a campaign: the one in the current folder when it holds a
campaign.toml, else campaigns/demo.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..notebook import NOTEBOOK_FILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "campaign",
        nargs="?",
        help="a campaign folder or its campaign.toml (default: this folder if it holds "
        "campaign.toml, else campaigns/demo)",
    )


def default_campaign(cwd: Path | None = None) -> Path:
    cwd = Path.cwd() if cwd is None else cwd
    if (cwd / NOTEBOOK_FILE).exists():
        return cwd
    return cwd / "campaigns" / "demo"


def run(args: argparse.Namespace) -> int:
    from ..tui.app import main

    campaign = Path(args.campaign) if args.campaign else default_campaign()
    return main(campaign)  # non-zero after an unhandled error; says what keeps running
