"""``cockpit new NAME``: create ``campaigns/NAME/campaign.toml`` from the template."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from .. import notebook
from ..errors import UsageError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="campaign name: letters, digits, '.', '_' or '-'")
    parser.add_argument(
        "--dir",
        default="campaigns",
        type=Path,
        help="folder that holds the campaigns (default: campaigns)",
    )


def run(args: argparse.Namespace) -> int:
    name: str = args.name
    if not _NAME.match(name):
        raise UsageError(
            f"{name!r} is not a usable campaign name: it becomes a folder and the notebook's "
            f"campaign.name, so use letters, digits, '.', '_' or '-' (at most 64, starting with "
            f"a letter or digit), for example `cockpit new lr-sweep`."
        )
    folder: Path = args.dir / name
    target = folder / notebook.NOTEBOOK_FILE
    if target.exists():
        raise UsageError(
            f"{target} already exists; Cockpit never overwrites a notebook. Choose another name, "
            f"or check the existing one with `cockpit check {folder}`."
        )
    folder.mkdir(parents=True, exist_ok=True)
    try:
        notebook.create(target, notebook.template(name))
    except notebook.ConflictError:
        raise UsageError(f"{target} appeared while it was being created; nothing was overwritten.") from None
    print(f"Created {target}.")
    print("Next: write the question, the task and the variants in it, then run")
    print(f"  cockpit check {folder}")
    return 0
