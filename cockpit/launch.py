"""Starting and stopping runs, detached from the terminal: the one place that does it. No torch.

A run (pilot or training) runs in its own session (``start_new_session``),
with its output in the run folder, so closing the SSH session or quitting
the TUI never kills it; anything can reattach later by tailing
``events.jsonl``. The CLI, the TUI and a series all start runs through
:func:`new_run`, and stop them through :func:`stop`, which signals only a
process that :func:`cockpit.runs.owned` recognises as this run's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import notebook as nbm
from . import runs
from .contract import Params
from .runs import stored

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def nproc_for(nb: nbm.Notebook) -> int:
    """Processes per run: one per data replica when the selection says DDP or FSDP, else one."""
    return nb.batch.data_replicas if nb.selection.strategy in ("DDP", "FSDP") else 1


def command(rdir: Path, nproc: int = 1, nnodes: int = 1, rdzv: str | None = None, resume: bool = False) -> list[str]:
    tail = [str(rdir), *(["--resume"] if resume else [])]
    if nproc <= 1 and nnodes <= 1:
        return [sys.executable, "-m", "cockpit.pilot", *tail]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", f"--nnodes={nnodes}"]
    if rdzv:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv}"]
    else:
        cmd += ["--standalone"]
    return [*cmd, "-m", "cockpit.pilot", *tail]


def start(
    rdir: Path,
    nproc: int = 1,
    nnodes: int = 1,
    rdzv: str | None = None,
    env: dict[str, str] | None = None,
    resume: bool = False,
) -> int:
    """Start the process of an existing run folder; returns its pid."""
    rdir = Path(rdir).resolve()
    child_env = dict(os.environ)
    child_env["PYTHONUNBUFFERED"] = "1"
    # The task may live next to the campaign or in the current project: keep both importable.
    paths = [os.getcwd(), str(rdir.parent.parent)]
    if child_env.get("PYTHONPATH"):
        paths.append(child_env["PYTHONPATH"])
    child_env["PYTHONPATH"] = os.pathsep.join(paths)
    if env:
        child_env.update(env)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(rdir / runs.REMOTE_FILE)  # an earlier process ran on a Ray node: this one lives by its local pid
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(rdir / runs.LOG_FILE, flags, 0o644)
    argv = command(rdir, nproc, nnodes, rdzv, resume)
    # A single run process starts with SIGTERM and SIGINT blocked (the mask survives exec) and unblocks
    # them once its handlers are installed: a stop during its start-up is then a stop, never a crash.
    # torchrun installs its own handlers and is left alone.
    single = nproc <= 1 and nnodes <= 1
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if single else None
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=child_env,
            cwd=os.getcwd(),
            close_fds=True,
        )
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(fd)
    try:
        runs.write_process(rdir, proc.pid, argv)
    except BaseException:
        # Unrecorded, it could never be stopped by Cockpit: end it now (it is ours: we hold its handle).
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    # Keep a handle so the zombie is reaped if this process waits; detached otherwise.
    _children[proc.pid] = proc
    return proc.pid


Starter = Callable[..., Any]  # start(rdir, nproc=..., env=...) -> pid


def new_run(
    campaign: Path | str,
    variant: str | None,
    seed: int,
    *,
    kind: str = "pilot",
    follows: str = "",
    overrides: Params | None = None,
    nproc: int | None = None,
    nnodes: int = 1,
    rdzv: str | None = None,
    env: dict[str, str] | None = None,
    starter: Starter | None = None,
    extra: dict[str, runs.TomlValue] | None = None,
    notes: str = "",
) -> tuple[str, Path]:
    """Create a run (its id, run.toml and notebook row) and start its process detached.

    Rows of runs that ended without writing their end are settled first (this
    changes the campaign). ``starter`` replaces :func:`start` (the TUI's tests
    start a harmless process).
    """
    path = nbm.find(campaign)
    nb = runs.settle(path)
    if nproc is None:
        nproc = nproc_for(nb)
    info: dict[str, runs.TomlValue] = {
        "launch": {"nproc": nproc, "nnodes": nnodes, "rdzv": rdzv or ""},
        **(extra or {}),
    }
    rid, rdir = runs.create_run(
        path, variant, seed, kind=kind, follows=follows, overrides=overrides, extra=info, read=nb, notes=notes
    )
    if starter is None:
        start(rdir, nproc=nproc, nnodes=nnodes, rdzv=rdzv, env=env)
    else:
        starter(rdir, nproc=nproc, env=env)
    return rid, rdir


RESUMABLE = ("stopped", "crashed")  # ended from outside: the same run goes on from its last checkpoint


def resume_run(
    campaign: Path | str, rid: str, *, env: dict[str, str] | None = None, starter: Starter | None = None
) -> Path:
    """Start a stopped or crashed training run again, as the same run, from its newest checkpoint.

    The row records the resume ("from update N at <time>"); the run's files go on
    from that checkpoint (rows after it are cut) and its events gain a new process.
    """
    from .errors import UsageError

    path = nbm.find(campaign)
    nb = runs.settle(path)
    try:
        rdir = runs.run_dir(path.parent, rid)
    except runs.BadRunId as exc:
        raise UsageError(str(exc)) from None
    if not (rdir / runs.RUN_FILE).is_file():
        raise UsageError(f"{rdir}: no such run; `cockpit runs {path.parent}` lists them")
    meta = runs.run_meta(rdir)
    st = runs.state(rdir)
    if meta.get("kind") != "train":
        raise UsageError(
            f"{rid} is a pilot: pilots are not resumed, start a new one with `cockpit pilot {path.parent}`"
        )
    if st.status not in RESUMABLE:
        raise UsageError(
            f"{rid} is {st.status}: only a stopped or crashed training run is resumed "
            f"({st.stop_reason or 'no reason recorded'})"
        )
    points = stored.checkpoint_steps(rdir)  # in the run's folder, or in [cluster] storage (a Ray series')
    recorded_there = sorted(e["path"] for e in stored.stored(rdir).values())
    if not points and recorded_there:
        raise UsageError(
            f"{rid}: its periodic checkpoints are recorded in [cluster] storage ({recorded_there[-1]}), which this "
            f"machine does not reach: mount that storage here at the same path, or resume it on the Ray cluster "
            f"(`cockpit series {path.parent} --resume --ray ADDRESS`)"
        )
    if not points:
        raise UsageError(
            f"{rid} wrote no periodic checkpoint before it ended ({st.stop_reason}); nothing to resume "
            f"from: run it again with `cockpit series {path.parent} --rerun {rid}`"
        )
    step, rel, there = points[-1]
    if there and starter is None:  # resumed here, not on a node: the newest checkpoint comes into the run's folder
        try:
            stored.bring_back(rdir, rel)
        except stored.StorageError as exc:
            raise UsageError(
                f"{rid}: its newest checkpoint (update {step}) is in [cluster] storage and cannot be brought back: "
                f"{exc}. Mount that storage here, or resume it on the Ray cluster (`cockpit series "
                f"{path.parent} --resume --ray ADDRESS`)"
            ) from None
    launched = (runs.read_run_toml(rdir).get("extra") or {}).get("launch")
    recorded = launched.get("nproc") if isinstance(launched, dict) else None
    nproc = int(recorded if isinstance(recorded, (int, float, str)) and recorded else nproc_for(nb))

    def note(fresh: nbm.Notebook) -> None:
        row = fresh.run(rid)
        row.resumed = "; ".join(x for x in (row.resumed, f"from update {step} at {runs.now()}") if x)
        row.status = "running"

    nbm.mutate(path, note)
    if starter is None:
        start(rdir, nproc=nproc, env=env, resume=True)
    else:
        starter(rdir, nproc=nproc, env=env, resume=True)
    return rdir


_children: dict[int, subprocess.Popen[bytes]] = {}


def reap() -> None:
    for pid, proc in list(_children.items()):
        if proc.poll() is not None:
            del _children[pid]


def stop(rdir: Path, grace_s: float = 10.0) -> str:
    """SIGTERM the run's process group, then SIGKILL after a grace period. Returns what happened.

    Nothing is signalled unless the process recorded in ``process.json`` is
    still the one Cockpit started for this run folder (pid, start time and
    command line): a stale or planted file never makes Cockpit kill another process.
    """
    remote = runs.remote_info(rdir)
    if remote is not None:
        return _stop_remote(Path(rdir), remote, grace_s)
    proc = runs.owned(rdir)
    if proc is None:
        return "not running" if not runs.is_alive(rdir) else "not stopped: the recorded process is not this run's"
    pid = int(proc.pid)
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return "not running"
    if pgid != pid:
        # Cockpit starts every run as the leader of its own session and group; a process that is
        # not its group's leader was not started by Cockpit, so only it (never its group) is signalled.
        pgid = 0
    _signal(pid, pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap()
        if not runs.is_alive(rdir):
            return "stopped (SIGTERM)"
        time.sleep(0.05)
    if runs.owned(rdir) is None:
        return "stopped (SIGTERM)"
    try:
        _signal(pid, pgid, signal.SIGKILL)
    except ProcessLookupError:
        return "stopped (SIGTERM)"
    reap()
    return f"killed (SIGKILL after {grace_s:g} s)"


# How long a stop of a remote run waits, beyond its grace, for the series to bring back the run's end.
REMOTE_STOP_MARGIN_S = 60.0


def _stop_remote(rdir: Path, remote: runs.RemoteInfo, grace_s: float) -> str:
    """A run on a Ray node: ask the head's series, which alone holds its task, and wait for its end to come back.

    The series passes the stop to exactly that task, which stops exactly its run's process on the node (as
    :func:`stop` does on one box: SIGTERM, SIGKILL after the grace); a task whose run does not end by then is
    cancelled by force. Nothing else is signalled, here or there.
    """
    if not runs.remote_alive(remote):
        return "not running"
    runs.request_stop(rdir, grace_s)
    where = f"on node {remote.get('hostname')} ({str(remote.get('node_id', ''))[:12]})" if remote.get("node_id") else ""
    deadline = time.monotonic() + grace_s + REMOTE_STOP_MARGIN_S
    while time.monotonic() < deadline:
        if not runs.is_alive(rdir):
            st = runs.state(rdir)
            return f"{st.status} (its Ray task {where} ended: {st.stop_reason})".replace("  ", " ")
        time.sleep(0.2)
    return f"stop asked of the series that holds its Ray task {where}; it has not ended yet".replace("  ", " ")


def _signal(pid: int, pgid: int, sig: signal.Signals) -> None:
    if pgid:
        os.killpg(pgid, sig)
    else:
        os.kill(pid, sig)


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
