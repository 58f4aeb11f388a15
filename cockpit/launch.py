"""Start and stop pilot processes, detached from the terminal. No torch.

A pilot runs in its own session (``start_new_session``), with its output in
the run folder, so closing the SSH session or quitting the TUI never kills
it; anything can reattach later by tailing ``events.jsonl``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import runs


def pilot_command(rdir: Path, nproc: int = 1, nnodes: int = 1, rdzv: str | None = None) -> list[str]:
    if nproc <= 1 and nnodes <= 1:
        return [sys.executable, "-m", "cockpit.pilot", str(rdir)]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", f"--nnodes={nnodes}"]
    if rdzv:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv}"]
    else:
        cmd += ["--standalone"]
    return [*cmd, "-m", "cockpit.pilot", str(rdir)]


def start(rdir: Path, nproc: int = 1, nnodes: int = 1, rdzv: str | None = None, env: dict[str, str] | None = None) -> int:
    """Start the pilot for an existing run folder; returns its pid."""
    rdir = Path(rdir).resolve()
    log = open(rdir / runs.LOG_FILE, "ab", buffering=0)  # noqa: SIM115 - handed to the child, closed below
    child_env = dict(os.environ)
    child_env["PYTHONUNBUFFERED"] = "1"
    # The task may live next to the campaign or in the current project: keep both importable.
    paths = [os.getcwd(), str(rdir.parent.parent)]
    if child_env.get("PYTHONPATH"):
        paths.append(child_env["PYTHONPATH"])
    child_env["PYTHONPATH"] = os.pathsep.join(paths)
    if env:
        child_env.update(env)
    proc = subprocess.Popen(
        pilot_command(rdir, nproc, nnodes, rdzv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=child_env,
        cwd=os.getcwd(),
        close_fds=True,
    )
    log.close()
    runs.write_process(rdir, proc.pid)
    # Keep a handle so the zombie is reaped if this process waits; detached otherwise.
    _children[proc.pid] = proc
    return proc.pid


_children: dict[int, subprocess.Popen] = {}


def reap() -> None:
    for pid, proc in list(_children.items()):
        if proc.poll() is not None:
            del _children[pid]


def stop(rdir: Path, grace_s: float = 10.0) -> str:
    """SIGTERM the run's process group, then SIGKILL after a grace period.

    Returns what happened, in words.
    """
    info = runs.process_info(rdir)
    if not info or not runs.is_alive(rdir):
        return "not running"
    pid = int(info["pid"])
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return "not running"
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap()
        if not runs.is_alive(rdir):
            return "stopped (SIGTERM)"
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return "stopped (SIGTERM)"
    reap()
    return f"killed (SIGKILL after {grace_s:g} s)"


def wait(rdir: Path, timeout: float | None = None, poll_s: float = 0.1) -> bool:
    """Wait until the run's process is gone. True if it ended."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while runs.is_alive(rdir):
        reap()
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    reap()
    return True
