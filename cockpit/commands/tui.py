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
    import sys

    from ..tui.app import CockpitApp

    campaign = Path(args.campaign) if args.campaign else default_campaign()
    app = CockpitApp(campaign)
    app.run()
    code = app.return_code or 0
    if code:  # an unhandled exception ended the app (Textual printed it): never report success
        print(
            "cockpit tui: the cockpit ended after an unexpected error (above); runs it started keep running. "
            "Open it again with `cockpit`.",
            file=sys.stderr,
        )
    return int(code)
