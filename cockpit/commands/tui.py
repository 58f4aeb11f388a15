"""``cockpit [tui] [CAMPAIGN]``: open the live cockpit (the default command).

Without a campaign: the one in the current folder when it holds a
campaign.toml; else the only campaign under campaigns/ (campaigns/demo when
there are several and it is one of them); else it says which exist.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from ..notebook import NOTEBOOK_FILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "campaign",
        nargs="?",
        help="a campaign folder, its campaign.toml, or a name under campaigns/ (default: this folder if it holds "
        "campaign.toml, else the only campaign under campaigns/)",
    )


def campaigns_here(cwd: Path) -> list[Path]:
    folder = cwd / "campaigns"
    try:
        return sorted(p for p in folder.iterdir() if (p / NOTEBOOK_FILE).is_file())
    except OSError:
        return []


def default_campaign(cwd: Path | None = None) -> Path:
    cwd = Path.cwd() if cwd is None else cwd
    if (cwd / NOTEBOOK_FILE).exists():
        return cwd
    found = campaigns_here(cwd)
    if len(found) == 1:
        return found[0]
    if any(p.name == "demo" for p in found) or not found:
        return cwd / "campaigns" / "demo"
    raise UsageError(
        f"which campaign? {cwd / 'campaigns'} holds {len(found)}: {', '.join(p.name for p in found)}. "
        "Open one with `cockpit NAME` (or `cockpit campaigns/NAME`)."
    )


def run(args: argparse.Namespace) -> int:
    from ..notebook.parse import resolve
    from ..tui.app import main

    campaign = resolve(args.campaign) if args.campaign else default_campaign()
    return main(campaign)  # non-zero after an unhandled error; says what keeps running
