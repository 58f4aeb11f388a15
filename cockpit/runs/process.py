"""The detached process of a run: ``process.json``, whether it lives, whether it is ours.

``process.json`` records the pid, the process's start time (so a recycled pid
is never mistaken for the run) and its command line. A process counts as the
run's only when all three still match; anything that signals a run (``cockpit
stop``, the TUI's ``x``, a series) asks :func:`owned` first, so a planted or
stale file never makes Cockpit signal a process it did not start.

A run placed on another node by a Ray series has no local process: instead of
``process.json`` its folder holds ``remote.json``, written only by the head's
series (``cockpit.cluster``): the Ray task, the node it runs on, a heartbeat the
series refreshes while it holds the task, and, once the task ended, how. Its
liveness is that record's word (:func:`remote_alive`), never a local pid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict, cast

from .. import fsutil
from .files import PROCESS_FILE, REMOTE_FILE, STOP_FILE, now


class ProcessInfo(TypedDict, total=False):
    """``process.json`` as written; a reader checks every field's type (the file may be planted or stale)."""

    pid: int
    create_time: float | None  # psutil's, in seconds since the epoch; None: the process was already gone
    cmdline: list[str]
    start_ticks: int  # clock ticks since boot (Linux), immune to the wall clock stepping
    started: str


def write_process(rdir: Path | str, pid: int, argv: list[str]) -> None:
    """Record the process just started for the run: its pid, start time and the command it runs."""
    info: ProcessInfo = {"pid": pid, "create_time": _create_time(pid), "cmdline": [str(a) for a in argv]}
    ticks = start_ticks(pid)
    if ticks is not None:
        info["start_ticks"] = ticks
    info["started"] = now()
    fsutil.write_text(Path(rdir) / PROCESS_FILE, json.dumps(info))


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (Linux ``/proc/PID/stat``, field 22).

    psutil's ``create_time`` is boot time plus these ticks, and the boot time it reads is the wall clock less the
    uptime: when the wall clock steps (a VM's clock resynchronised), every process's create_time moves with it and
    a live run compared by create_time alone looks recycled, then crashed. The ticks never move.
    """
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _create_time(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001 - gone already: recorded as unknown, never trusted
        return None


def process_info(rdir: Path | str) -> ProcessInfo | None:
    """The recorded process, or None (absent, a link, not a regular file, not a small JSON object)."""
    try:
        info = json.loads(fsutil.read_regular(Path(rdir) / PROCESS_FILE, 65536))
    except (OSError, ValueError, RecursionError):
        return None
    return cast(ProcessInfo, info) if isinstance(info, dict) else None


def _process(info: ProcessInfo | None) -> Any:
    """The psutil.Process the record names, if it is still that very process (pid and start time)."""
    if not info:
        return None
    pid, ct = info.get("pid"), info.get("create_time")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or not isinstance(ct, (int, float)):
        return None  # an unknown start time is never taken on trust
    try:
        import psutil

        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        ticks = info.get("start_ticks")
        if isinstance(ticks, int) and not isinstance(ticks, bool):
            now_ticks = start_ticks(pid)
            if now_ticks is not None:  # immune to the wall clock stepping
                return proc if now_ticks == ticks else None  # else the pid was recycled by another process
        if abs(proc.create_time() - float(ct)) >= 1.0:
            return None  # the pid was recycled by another process
        return proc
    except Exception:  # noqa: BLE001 - gone, or not ours to inspect
        return None


def is_alive(rdir: Path | str) -> bool:
    """Whether the run's own process still runs: the recorded pid, start time *and* command line.

    A planted ``process.json`` naming some other live process (or one with an
    unknown start time) makes the run look ended, never running: it is then
    settled as crashed instead of showing "running" for ever. A run on another
    node (``remote.json``) lives by its record, :func:`remote_alive`.
    """
    remote = remote_info(rdir)
    if remote is not None:
        return remote_alive(remote)
    return owned(rdir, wait_s=1.0) is not None


class RemoteInfo(TypedDict, total=False):
    """``remote.json``: a run that a series placed on a node of a Ray cluster (written by the head's series only)."""

    address: str  # the Ray cluster's address, as the series connected to it
    task_id: str  # the Ray task that runs it (hex)
    submitted: str
    node_id: str  # the Ray node it runs on (hex), once it started there
    hostname: str
    node_ip: str
    node_dir: str  # its run folder on that node (node-local, never the head's)
    beat: float  # the head's clock when the series' keeper last held the task (seconds since the epoch)
    ended: bool  # the task is over (its files are back, or its node was lost)
    reason: str  # why it ended without a final event: the node lost, the task cancelled
    keeper: str  # the detached Ray actor on the head that holds its task (``series:<campaign>:...``)
    files: int  # how many files of the node's copy the head was found to hold byte for byte when it ended
    node_copy: str  # what became of the node-local copy: "removed", or "kept: <why>"
    store: str  # the run's folder in [cluster] storage, where its checkpoints are (absent: they came to the head)
    storage: str  # a checkpoint the node could not copy into the storage, which came to the head instead


# A series' keeper refreshes the heartbeat of every run it holds every couple of seconds; a record this old means
# nothing holds the task any more (the keeper, or the head's Ray, is gone): Ray ends the tasks of an owner that died.
REMOTE_STALE_S = 30.0


def remote_info(rdir: Path | str) -> RemoteInfo | None:
    """The run's ``remote.json``, or None: no such file, a link, not a small JSON object."""
    try:
        info = json.loads(fsutil.read_regular(Path(rdir) / REMOTE_FILE, 65536))
    except (OSError, ValueError, RecursionError):
        return None
    return cast(RemoteInfo, info) if isinstance(info, dict) else None


def remote_alive(info: RemoteInfo, now_t: float | None = None) -> bool:
    """A remote run lives while its task has not ended and a series still holds it (a fresh heartbeat)."""
    import time

    if info.get("ended"):
        return False
    beat = info.get("beat")
    if isinstance(beat, bool) or not isinstance(beat, (int, float)):
        return False
    return (time.time() if now_t is None else now_t) - float(beat) < REMOTE_STALE_S


def write_remote(rdir: Path | str, info: RemoteInfo) -> None:
    """Record (or update) the run's Ray task: the head's series is this file's only writer."""
    fsutil.write_text(Path(rdir) / REMOTE_FILE, json.dumps(info))


def owned(rdir: Path | str, wait_s: float = 2.0) -> Any:
    """The run's process when it is alive *and* a Cockpit process of this run folder, else None.

    Beyond pid and start time, its command line must be the one recorded at
    start, which runs ``cockpit.pilot`` on this very run folder: the only
    processes Cockpit ever signals are the ones it started for this run. A
    process started a moment ago may still be inside its ``exec``, when the
    kernel shows an empty command line (a launcher returns from starting it
    before that ends): that, and only that, is waited for, up to ``wait_s``;
    another command line is refused at once.
    """
    import time

    rdir = Path(rdir).resolve()
    info = process_info(rdir)
    recorded = (info or {}).get("cmdline")
    if not _ours(recorded, rdir):
        return None
    deadline = time.monotonic() + wait_s
    while True:
        proc = _process(info)
        if proc is None:
            return None
        try:
            cmdline = list(proc.cmdline())
        except Exception:  # noqa: BLE001 - gone, or not ours to inspect
            return None
        if cmdline == recorded:
            return proc
        if cmdline or time.monotonic() >= deadline:
            return None  # another command line: not this run's process
        time.sleep(0.02)


def _ours(cmdline: Any, rdir: Path) -> bool:
    """A command line Cockpit records: ``... -m cockpit.pilot RUN_DIR [--resume]`` with this run folder last."""
    if not isinstance(cmdline, list) or not all(isinstance(a, str) for a in cmdline):
        return False
    args = cmdline[:-1] if cmdline[-1:] == ["--resume"] else cmdline
    return len(args) >= 3 and args[-1] == str(rdir) and args[-3:-1] == ["-m", "cockpit.pilot"]


def request_stop(rdir: Path | str, grace_s: float) -> None:
    """Ask the head's series to stop a remote run (``cockpit stop``, the TUI's stop): it alone holds the Ray task."""
    fsutil.write_text(Path(rdir) / STOP_FILE, json.dumps({"grace_s": float(grace_s), "asked": now()}))


def stop_requested(rdir: Path | str) -> float | None:
    """The grace of a stop asked of a remote run, or None when none was asked."""
    try:
        info = json.loads(fsutil.read_regular(Path(rdir) / STOP_FILE, 4096))
    except (OSError, ValueError, RecursionError):
        return None
    grace = info.get("grace_s") if isinstance(info, dict) else None
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < 1e6:
        return 10.0
    return float(grace)
