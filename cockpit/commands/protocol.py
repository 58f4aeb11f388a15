"""``cockpit protocol CAMPAIGN --why "..."``: declare a new protocol revision after the fixed rules changed.

The budget, what is held constant, the stop rules, the validation schedule and
the quality metric are fixed once a training run exists. To change them, edit
the notebook, then declare the revision here: the campaign's
``protocol_revision`` goes up by one and a dated decision records why and what
changed. Runs of different revisions are never pooled by compare.
"""

from __future__ import annotations

import argparse

from .. import notebook as nbm
from .. import protocol
from ..errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", help="campaign folder or campaign.toml")
    p.add_argument("--why", required=True, help="why the rules changed (recorded as a dated decision)")


def run(args: argparse.Namespace) -> int:
    if not args.why.strip():
        raise UsageError("--why: say why the protocol changes; it is recorded with the new revision")
    nbm.load(args.campaign)  # a notebook that does not load gets its one-paragraph error first
    rev, changed = protocol.declare(args.campaign, args.why.strip())
    what = "; ".join(changed) if changed else "no rule differs from the runs of the previous revision yet"
    print(
        f"protocol revision {rev} declared ({what}); runs before it stay in revision {rev - 1}, compared only among "
        "themselves"
    )
    return 0
