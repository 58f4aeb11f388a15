"""``python -m cockpit.pilot RUN_DIR``: the pilot process (or a series run, by the run's kind).

Never imports textual. Writes events to RUN_DIR/events.jsonl, records the
outcome in the notebook's run row, and exits with a code per outcome
(``cockpit.events.ExitCode``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import events as ev
from .. import runs


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m cockpit.pilot RUN_DIR", file=sys.stderr)
        return int(ev.ExitCode.USAGE)
    rdir = Path(argv[0]).resolve()
    if not (rdir / runs.RUN_FILE).is_file():
        print(f"{rdir}: no {runs.RUN_FILE}; create runs with `cockpit pilot CAMPAIGN`", file=sys.stderr)
        return int(ev.ExitCode.USAGE)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    kind = runs.read_run_toml(rdir)["run"].get("kind", "pilot")
    from .gates import install_signal_handlers

    install_signal_handlers()
    # Every rank appends whole lines to the same file (one write per event, O_APPEND).
    path = rdir / ev.EVENTS_FILE
    writer = ev.EventWriter(path, rank=rank if world > 1 else None)
    try:
        if world > 1:
            from . import dist

            dist.init()
        if kind == "pilot":
            from .gates import Pilot

            code = Pilot(rdir, writer, rank, world).run()
        else:
            from .series import run_training

            code = run_training(rdir, writer, rank, world)
    except BaseException as exc:  # noqa: BLE001 - record the outcome before dying, whatever it is
        import traceback

        traceback.print_exc()
        stopped = type(exc).__name__ in ("Stopped", "KeyboardInterrupt")
        code = int(ev.ExitCode.STOPPED if stopped else ev.ExitCode.INTERNAL)
        writer.emit(
            ev.RUN_END,
            status=(ev.Status.STOPPED if stopped else ev.Status.ERROR).value,
            stop_reason="stopped by signal" if stopped else f"internal error: {type(exc).__name__}: {exc} (see output.log)",
            phase=ev.last_phase(ev.read_events(path)),
            message=str(exc),
            exit_code=code,
        )
    finally:
        writer.close()
        if world > 1:
            import torch.distributed

            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    if rank == 0:
        try:
            runs.record_state(rdir.parent.parent, rdir)
        except Exception as exc:  # noqa: BLE001 - the run's own files stay the source of truth
            print(f"[warn] could not update the notebook's run row: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
