"""``python -m cockpit.pilot RUN_DIR [--resume]``: the process of a run, a pilot or a training run (by its run.toml).

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
from . import signals


def main(argv: list[str]) -> int:
    resume = "--resume" in argv
    argv = [a for a in argv if a != "--resume"]
    if len(argv) != 1:
        print("usage: python -m cockpit.pilot RUN_DIR [--resume]", file=sys.stderr)
        return int(ev.ExitCode.USAGE)
    rdir = Path(argv[0]).resolve()
    if not (rdir / runs.RUN_FILE).is_file():
        print(f"{rdir}: no {runs.RUN_FILE}; create runs with `cockpit pilot CAMPAIGN`", file=sys.stderr)
        return int(ev.ExitCode.USAGE)
    signals.install()  # before torch is imported: a stop from now on is a stop
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    try:
        return run(rdir, rank, world, resume)
    except signals.Stopped as exc:  # arrived while the run's modules were still being imported
        with ev.EventWriter(rdir / ev.EVENTS_FILE, rank=rank if world > 1 else None) as writer:
            writer.emit(
                ev.RUN_END,
                status=ev.Status.STOPPED.value,
                stop_reason=f"stopped by signal ({exc}) before the run started",
                phase=None,
                message=str(exc),
                exit_code=int(ev.ExitCode.STOPPED),
            )
        if rank == 0:
            runs.settle_run(rdir.parent.parent, rdir)
        return int(ev.ExitCode.STOPPED)


def run(rdir: Path, rank: int, world: int, resume: bool = False) -> int:
    """Run the process of a run folder (pilot or training, by its run.toml); record its row at the end."""
    from .pilot import PilotRun
    from .process import RunProcess, outcome_of
    from .training import TrainingRun

    kind = runs.read_run_toml(rdir)["run"].get("kind", "pilot")
    # Every rank appends whole lines to the same file (one write per event, O_APPEND).
    path = rdir / ev.EVENTS_FILE
    writer = ev.EventWriter(path, rank=rank if world > 1 else None)
    try:
        if world > 1:
            from . import dist

            dist.init()
        proc: RunProcess
        if kind == "pilot":
            proc = PilotRun(rdir, writer, rank, world)
        else:
            proc = TrainingRun(rdir, writer, rank, world, resume=resume)
        code = proc.run()
    except BaseException as exc:  # noqa: BLE001 - record the outcome before dying, whatever it is
        outcome = outcome_of(exc, "before the run started" if not path.exists() else "outside any phase")
        code = int(outcome.code)
        writer.emit(
            ev.RUN_END,
            status=outcome.status.value,
            stop_reason=outcome.reason,
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
            runs.settle_run(rdir.parent.parent, rdir)
        except Exception as exc:  # noqa: BLE001 - the run's own files stay the source of truth
            print(f"[warn] could not update the notebook's run row: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
