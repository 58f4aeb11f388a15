"""``python -m cockpit.pilot RUN_DIR``: the process of a run, a pilot or a training run (by its run.toml).

Never imports textual. Writes events to RUN_DIR/events.jsonl, records the
outcome in the notebook's run row, and exits with a code per outcome
(``cockpit.events.ExitCode``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from .. import events as ev
    from .. import runs

    if len(argv) != 1:
        print("usage: python -m cockpit.pilot RUN_DIR", file=sys.stderr)
        return int(ev.ExitCode.USAGE)
    rdir = Path(argv[0]).resolve()
    if not (rdir / runs.RUN_FILE).is_file():
        print(f"{rdir}: no {runs.RUN_FILE}; create runs with `cockpit pilot CAMPAIGN`", file=sys.stderr)
        return int(ev.ExitCode.USAGE)
    from .process import main as run_main

    return run_main(rdir, int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
