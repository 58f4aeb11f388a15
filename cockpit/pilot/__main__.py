"""``python -m cockpit.pilot RUN_DIR [--resume]``: the process of a run, a pilot, a training run or a probe
(by its run.toml's kind).

Never imports textual. Writes events to RUN_DIR/events.jsonl, records the
outcome in the notebook's run row, and exits with a code per outcome
(``cockpit.events.ExitCode``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import events as ev
from .. import fsutil, runs
from . import signals


def main(argv: list[str]) -> int:
    resume = "--resume" in argv
    argv = [a for a in argv if a != "--resume"]
    if len(argv) != 1:
        signals.install()
        print("usage: python -m cockpit.pilot RUN_DIR [--resume]", file=sys.stderr)
        return int(ev.ExitCode.USAGE)
    rdir = Path(argv[0]).resolve()
    rank, world = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    try:
        # Before torch is imported, and inside the try: the launcher started this process with the stop
        # signals blocked, so a stop that arrived during start-up is raised here and recorded as a stop.
        signals.install()
        if not (rdir / runs.RUN_FILE).is_file():
            print(f"{rdir}: no {runs.RUN_FILE}; create runs with `cockpit pilot CAMPAIGN`", file=sys.stderr)
            return int(ev.ExitCode.USAGE)
        return run(rdir, rank, world, resume)
    except signals.Stopped as exc:  # arrived while the run's modules were still being imported
        with ev.EventWriter(rdir / ev.EVENTS_FILE, rank=rank if world > 1 else None) as writer:
            stopped = ev.Outcome.of(
                ev.Status.STOPPED, f"stopped by signal ({signals.received() or exc}) before the run started"
            )
            writer.emit(ev.RUN_END, **ev.run_end_fields(stopped, None, str(exc)))
        _end(rdir, rank)
        return int(ev.ExitCode.STOPPED)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _end(rdir: Path, rank: int) -> None:
    """The run's last acts (rank 0): its notebook row, its events' summary, no temporaries left behind."""
    fsutil.release()
    if rank != 0:
        return
    try:
        runs.finish_run(rdir.parent.parent, rdir)
    except Exception as exc:  # noqa: BLE001 - the run's own files stay the source of truth
        print(f"[warn] could not update the notebook's run row: {exc}", file=sys.stderr)


def run(rdir: Path, rank: int, world: int, resume: bool = False) -> int:
    """Run the process of a run folder (pilot, training or probe, by its run.toml); record its row at the end."""
    kind = runs.read_run_toml(rdir)["run"].get("kind", "pilot")
    with signals.held():  # torch and numpy load C extensions, which a stop must not break: it waits for them
        from .pilot import PilotRun
        from .process import RunProcess, outcome_of
        from .training import TrainingRun

        if kind == "probe":
            from ..probe.runner import ProbeRun
        if world > 1:
            import torch.distributed  # noqa: F401 - loaded here, under the hold, before dist.init uses it
    # Room for the last word: if the disk fills, giving it back lets the run write its end and its row.
    fsutil.reserve(rdir / f".disk-reserve-{rank}.tmp")
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
        elif kind == "probe":
            proc = ProbeRun(rdir, writer, rank, world)
        else:
            proc = TrainingRun(rdir, writer, rank, world, resume=resume)
        code = proc.run()
    except BaseException as exc:  # noqa: BLE001 - record the outcome before dying, whatever it is
        outcome = outcome_of(exc, "before the run started" if not path.exists() else "outside any phase")
        code = int(outcome.code)
        if outcome.code == ev.ExitCode.DISK_FULL:
            fsutil.release()
        try:
            phase = ev.last_phase(runs.summary(rdir, write_back=False).events)
            writer.emit(ev.RUN_END, **ev.run_end_fields(outcome, phase, str(exc)))
        except OSError as err:  # a full disk may refuse even the final event: said in output.log
            print(f"[error] could not write the final event ({outcome.reason}): {err}", file=sys.stderr)
    finally:
        try:
            writer.close()
        except OSError as err:
            print(f"[error] could not close {path}: {err}", file=sys.stderr)
        if world > 1:
            import torch.distributed

            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    _end(rdir, rank)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
