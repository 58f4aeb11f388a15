"""Running the shelf: every case a real detached pilot, started as ``cockpit pilot`` starts it, a few at a time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from cockpit import launch, runs
from tests.shelf.campaigns import write

ROOT = Path(__file__).resolve().parents[2]


class Overdue(RuntimeError):
    """Some pilots were still running at the deadline (they were stopped)."""


def run_cases(
    root: Path,
    names: Iterable[str],
    parallel: int = 2,
    deadline_s: float = 1800,
    on_done: Callable[[str, runs.RunState], None] | None = None,
) -> dict[str, runs.RunState]:
    """Pilot every named case in ``root``; their final states by name, in the order they finished."""
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    waiting = list(names)
    running: dict[str, Path] = {}
    done: dict[str, runs.RunState] = {}
    deadline = time.monotonic() + deadline_s
    while waiting or running:
        while waiting and len(running) < parallel:
            name = waiting.pop(0)
            _, running[name] = launch.new_run(write(root, name), None, 0, env=env)
        for name, rdir in list(running.items()):
            if not running_still(rdir):
                launch.reap()
                done[name] = runs.state(rdir)
                del running[name]
                if on_done is not None:
                    on_done(name, done[name])
        if time.monotonic() > deadline:
            for rdir in running.values():
                launch.stop(rdir, grace_s=5)
            raise Overdue(f"shelf pilots still running after {deadline_s:.0f} s: {', '.join(running)}")
        time.sleep(0.2)
    return done


def running_still(rdir: Path) -> bool:
    """The pilot's process lives. ``runs.is_alive`` also compares the process's start time, which psutil derives
    from the boot time and the wall clock: on a machine whose clock steps (a virtual machine resumed), a live
    pilot then looks gone and its run reads "crashed". Here the pid and the command line decide."""
    if runs.is_alive(rdir):
        return True
    info = runs.process_info(rdir) or {}
    try:
        import psutil

        proc = psutil.Process(int(info.get("pid", 0)))
        return proc.status() != psutil.STATUS_ZOMBIE and list(proc.cmdline()) == info.get("cmdline")
    except Exception:  # noqa: BLE001 - gone
        return False


def log_tail(st: runs.RunState, n: int = 3000) -> str:
    return (st.dir / runs.LOG_FILE).read_text(errors="replace")[-n:]
