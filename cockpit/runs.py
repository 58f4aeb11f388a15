"""Run folders: create, list, derive status, reconcile with the notebook. No torch.

A run lives in ``campaigns/<campaign>/runs/<run-id>/``:

- ``run.toml``      frozen at creation: task, variant, parameters, seed, stack, command
- ``process.json``  the detached process (pid and its start time, to survive pid reuse)
- ``events.jsonl``  append-only events written by the pilot (the source of truth)
- ``output.log``    the pilot's stdout and stderr
- checkpoints, the exported artifact, inspected examples, curves ...

A run's status is derived from its events; a run whose process is gone
without a final event is *crashed*, with the last phase it reached.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from . import events as ev
from . import notebook as nbm

RUNS_DIR = "runs"
RUN_FILE = "run.toml"
PROCESS_FILE = "process.json"
LOG_FILE = "output.log"


def now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def runs_dir(campaign_dir: Path) -> Path:
    return Path(campaign_dir) / RUNS_DIR


def run_dir(campaign_dir: Path, run_id: str) -> Path:
    return runs_dir(campaign_dir) / run_id


def _next_id(nb: nbm.Notebook, campaign_dir: Path) -> str:
    taken = {r.id for r in nb.runs}
    rd = runs_dir(campaign_dir)
    if rd.is_dir():
        taken |= {p.name for p in rd.iterdir()}
    n = 0
    for t in taken:
        if t.startswith("r") and t[1:].isdigit():
            n = max(n, int(t[1:]))
    return f"r{n + 1:04d}"


def package_versions(names: tuple[str, ...] = ("torch", "cockpit", "numpy", "nvidia-ml-py", "psutil")) -> dict[str, str]:
    """Installed versions, read from metadata: no import of torch needed."""
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def git_revision(where: Path) -> dict[str, Any]:
    """The git commit of the folder holding the campaign (and so usually the task code), at run time."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return {"git": "git not available"}
    if not commit:
        return {"git": "not a git checkout"}
    return {"git": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def create_run(
    campaign: Path | str,
    variant: str | None = None,
    seed: int = 0,
    kind: str = "pilot",
    follows: str = "",
    overrides: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[str, Path]:
    """Allocate a new run id (never reused), write its frozen run.toml and its notebook row.

    Both happen under the notebook lock, so two launchers never take the same id.
    """
    path = nbm.find(campaign)
    campaign_dir = path.parent
    box: dict[str, Any] = {}

    def add(nb: nbm.Notebook) -> None:
        vid = variant or nb.reference.id
        nb.variant(vid)  # raises a clear error for an unknown variant
        if follows:
            nb.run(follows)
        rid = _next_id(nb, campaign_dir)
        rdir = run_dir(campaign_dir, rid)
        rdir.mkdir(parents=True, exist_ok=False)
        params = nb.params(vid)
        params.update(overrides or {})
        frozen = {
            "run": {
                "id": rid,
                "campaign": nb.campaign.name,
                "variant": vid,
                "seed": seed,
                "kind": kind,
                "follows": follows,
                "created": now(),
            },
            "task": {"entry": nb.task.entry, "extensions": list(nb.task.extensions)},
            "params": {k: v for k, v in params.items() if v is not None},
            "pilot": {k: v for k, v in nb.pilot.__dict__.items() if v is not None},
            "stop": {k: v for k, v in nb.stop.__dict__.items() if v is not None},
            "validation": {k: v for k, v in nb.validation.__dict__.items() if v is not None},
            "stack": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "host": platform.node(),
                "packages": package_versions(),
            },
            "command": {"argv": list(sys.argv), "cwd": os.getcwd()},
            "revisions": git_revision(campaign_dir),
        }
        if extra:
            frozen["extra"] = extra
        with open(rdir / RUN_FILE, "xb") as fh:  # written once, never rewritten
            tomli_w.dump(frozen, fh)
        nb.runs.append(
            nbm.RunRow(id=rid, variant=vid, seed=seed, kind=kind, status=ev.Status.CREATED.value, follows=follows)
        )
        box["id"], box["dir"] = rid, rdir

    nbm.mutate(path, add)
    return box["id"], box["dir"]


def read_run_toml(rdir: Path) -> dict[str, Any]:
    import tomllib

    with open(Path(rdir) / RUN_FILE, "rb") as fh:
        return tomllib.load(fh)


# --------------------------------------------------------------------------- process


def write_process(rdir: Path, pid: int) -> None:
    info = {"pid": pid, "create_time": _create_time(pid), "started": now()}
    tmp = Path(rdir) / (PROCESS_FILE + ".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, Path(rdir) / PROCESS_FILE)


def _create_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:
        return None


def process_info(rdir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(rdir) / PROCESS_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None


def is_alive(rdir: Path) -> bool:
    info = process_info(rdir)
    if not info:
        return False
    pid = info.get("pid")
    try:
        import psutil

        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        ct = info.get("create_time")
        # A recycled pid belongs to another process: compare start times.
        return ct is None or abs(proc.create_time() - ct) < 1.0
    except Exception:
        return False


# --------------------------------------------------------------------------- status


@dataclass
class RunState:
    id: str
    dir: Path
    status: str
    phase: str | None
    stop_reason: str
    started: float | None
    ended: float | None
    peak_mib: float | None
    peak_counter: str
    gates: list[dict[str, Any]] = field(default_factory=list)
    run_end: dict[str, Any] | None = None

    @property
    def duration_s(self) -> float | None:
        if self.started is None:
            return None
        import time

        end = self.ended if self.ended is not None else time.time()
        return end - self.started


def peak_of(gates: list[dict[str, Any]]) -> tuple[float | None, str]:
    """The run's peak memory and which counter it is.

    On a GPU the per-GPU peak is torch's peak reserved (what the allocator
    held, the figure to size a GPU from, before the CUDA context); without a
    GPU, the process RSS. The counter is always named.
    """
    gpu = [g["mem"]["torch"]["peak_reserved"] for g in gates
           if ((g.get("mem") or {}).get("torch") or {}).get("peak_reserved") is not None]
    if gpu:
        return max(gpu) / 2**20, "torch peak reserved"
    rss = [g["mem"]["rss"] for g in gates if (g.get("mem") or {}).get("rss") is not None]
    if rss:
        return max(rss) / 2**20, "process RSS"
    return None, ""


# From worst to best: the run's status is its worst rank's.
_SEVERITY = ["crashed", "oom", "diverged", "error", "failed", "stopped", "running", "created", "completed", "passed"]


def _rank_end(evs: list[dict[str, Any]], world: int, alive: bool) -> tuple[str, str, str | None, dict[str, Any] | None]:
    """Status, reason, phase and final event of a distributed run, from every rank's events."""
    ends = {int(e.get("rank") or 0): e for e in ev.iter_kind(evs, ev.RUN_END)}
    missing = [r for r in range(world) if r not in ends]
    if missing and alive:
        return ev.Status.RUNNING.value, "", ev.last_phase(evs), None
    bad = [f"rank {r}: {e.get('stop_reason', '')}" for r, e in sorted(ends.items())
           if e.get("status") not in ("passed", "completed")]
    if missing:
        lost = [f"rank {r} ended without a final event during phase {ev.last_phase(evs, r) or 'start-up'}" for r in missing]
        reason = "; ".join(lost + bad)
        end = {"status": ev.Status.CRASHED.value, "stop_reason": reason, "exit_code": int(ev.ExitCode.RANK_FAILED),
               "phase": ev.last_phase(evs, missing[0])}
        return ev.Status.CRASHED.value, reason, end["phase"], end
    worst_rank, worst = min(ends.items(), key=lambda kv: _SEVERITY.index(kv[1].get("status", "error"))
                            if kv[1].get("status") in _SEVERITY else 0)
    reason = "; ".join(bad) or f"{worst.get('stop_reason', '')} on all {world} ranks"
    return worst.get("status", "error"), reason, worst.get("phase"), worst


def state(rdir: Path) -> RunState:
    rdir = Path(rdir)
    evs = ev.read_events(rdir / ev.EVENTS_FILE)
    start = next(ev.iter_kind(evs, ev.RUN_START), None)
    end = next(ev.iter_kind(evs, ev.RUN_END), None)
    gates = ev.gates(evs)
    peak, counter = peak_of(gates)
    phase = ev.last_phase(evs)
    world = int((start or {}).get("world") or 1)
    if world > 1 and start is not None:
        status, reason, ph, end = _rank_end(evs, world, is_alive(rdir))
        phase = ph or phase
        started = start["t"]
        ended = max((e["t"] for e in ev.iter_kind(evs, ev.RUN_END)), default=evs[-1]["t"]) if status != "running" else None
        return RunState(rdir.name, rdir, status, phase, reason, started, ended, peak, counter, gates, end)
    if end is not None:
        status = end.get("status", ev.Status.ERROR.value)
        reason = end.get("stop_reason", "")
        phase = end.get("phase") or phase
    elif is_alive(rdir):
        status, reason = ev.Status.RUNNING.value, ""
    elif process_info(rdir) is None and start is None:
        status, reason = ev.Status.CREATED.value, ""
    else:
        status = ev.Status.CRASHED.value
        reason = f"process ended without a final event during phase {phase or 'start-up'}"
    started = start["t"] if start else None
    ended = end["t"] if end else (evs[-1]["t"] if evs and status == ev.Status.CRASHED.value else None)
    return RunState(rdir.name, rdir, status, phase, reason, started, ended, peak, counter, gates, end)


def list_runs(campaign_dir: Path) -> list[RunState]:
    rd = runs_dir(Path(campaign_dir))
    if not rd.is_dir():
        return []
    return [state(p) for p in sorted(rd.iterdir()) if (p / RUN_FILE).exists()]


def _fmt_time(t: float | None) -> str:
    if t is None:
        return ""
    return _dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def apply_state(row: nbm.RunRow, st: RunState) -> bool:
    """Copy what the run folder says into the notebook row. True if anything changed."""
    before = (row.status, row.stop_reason, row.phase, row.started, row.ended, row.peak_mib, row.duration_s)
    row.status = st.status
    row.stop_reason = st.stop_reason or row.stop_reason
    row.phase = st.phase or row.phase
    row.started = _fmt_time(st.started) or row.started
    if st.status not in (ev.Status.RUNNING.value, ev.Status.CREATED.value):
        row.ended = _fmt_time(st.ended) or row.ended
        if st.duration_s is not None:
            row.duration_s = round(st.duration_s, 2)
    if st.peak_mib is not None:
        row.peak_mib = round(st.peak_mib, 1)
    after = (row.status, row.stop_reason, row.phase, row.started, row.ended, row.peak_mib, row.duration_s)
    return before != after


def reconcile(campaign: Path | str) -> nbm.Notebook:
    """Bring the notebook's run rows up to date with their folders.

    A run still marked created/running whose process is gone without a final
    event becomes *crashed* here: the next time anything reads the campaign.
    Rows are only ever updated, never removed or replaced.
    """
    path = nbm.find(campaign)
    nb = nbm.load(path)
    stale = [r for r in nb.runs if r.status in (ev.Status.CREATED.value, ev.Status.RUNNING.value)]
    if not stale:
        return nb
    states = {r.id: state(run_dir(path.parent, r.id)) for r in stale if run_dir(path.parent, r.id).is_dir()}
    if not any(st.status != next(r.status for r in stale if r.id == rid) for rid, st in states.items()):
        return nb

    def update(fresh: nbm.Notebook) -> None:
        for row in fresh.runs:
            st = states.get(row.id)
            if st is not None and row.status in (ev.Status.CREATED.value, ev.Status.RUNNING.value):
                apply_state(row, st)

    nbm.mutate(path, update)
    return nbm.load(path)


def record_state(campaign: Path | str, rdir: Path) -> None:
    """Write one run's derived state into its notebook row (called by the pilot at its end)."""
    st = state(rdir)

    def update(nb: nbm.Notebook) -> None:
        for row in nb.runs:
            if row.id == st.id:
                apply_state(row, st)

    nbm.mutate(campaign, update)
