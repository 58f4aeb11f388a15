"""Who writes the notebook's ``[[runs]]`` rows, and when. No torch.

The policy (README, "Architecture"):

- the **run folder holds the live status** (derived from its events and its
  process); readers take it from there through :func:`view`, which never writes;
- the row is **written twice, each time by one function**: :func:`create_run` at
  creation (status ``created``, with the frozen run.toml, under the notebook lock
  so two launchers never take one id) and :func:`settle_run` when the run ends,
  called by the run's own process (rank 0) as its last act;
- a run that could not write its end (killed with SIGKILL, its launcher dead) is
  settled by the next command that *changes* the campaign (``pilot``, ``series``,
  ``stop``) through :func:`settle`, never by a command or screen that only reads.

Rows are only ever updated, never removed or replaced.
"""

from __future__ import annotations

import copy
import os
import platform
import sys
from pathlib import Path
from typing import Any

import tomli_w

from .. import events as ev
from .. import notebook as nbm
from .files import RUN_FILE, fmt_time, now, order_key, run_dir, runs_dir
from .state import RunState, state


def _next_id(nb: nbm.Notebook, campaign_dir: Path) -> str:
    taken = {r.id for r in nb.runs}
    rd = runs_dir(campaign_dir)
    if rd.is_dir():
        taken |= {p.name for p in rd.iterdir()}
    n = max((order_key(t)[0] for t in taken if t.startswith("r")), default=0)
    return f"r{max(n, 0) + 1:04d}"


def package_versions(
    names: tuple[str, ...] = ("torch", "cockpit", "numpy", "nvidia-ml-py", "psutil"),
) -> dict[str, str]:
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


def protocol_record(nb: nbm.Notebook) -> dict[str, Any]:
    from ..protocol import record

    return record(nb)


def task_source(entry: str, campaign_dir: Path) -> Path | None:
    """The file the task entry lives in, found without importing anything (the TUI never imports torch)."""
    import sys

    where = entry.rpartition(":")[0]
    if where.endswith(".py"):
        p = Path(where)
        for c in [p] if p.is_absolute() else [campaign_dir / p, Path(os.getcwd()) / p]:
            if c.is_file():
                return c.resolve()
        return None
    parts = where.split(".")
    for base in [str(campaign_dir), os.getcwd(), *sys.path]:
        root = Path(base or ".").joinpath(*parts)
        for c in (root.with_suffix(".py"), root / "__init__.py"):
            if c.is_file():
                return c.resolve()
    return None


def task_revision(entry: str, campaign_dir: Path) -> dict[str, Any]:
    """A hash of the task's code: its file and the Python files beside it (the helpers it imports)."""
    import hashlib

    src = task_source(entry, campaign_dir)
    if src is None:
        return {"task_code": "not found"}
    h = hashlib.sha256()
    files = sorted(p for p in src.parent.glob("*.py") if p.is_file())[:200]
    for p in files:
        h.update(p.name.encode())
        h.update(p.read_bytes()[:5_000_000])
    return {"task_code": h.hexdigest(), "task_file": str(src)}


def create_run(
    campaign: Path | str,
    variant: str | None = None,
    seed: int = 0,
    kind: str = "pilot",
    follows: str = "",
    overrides: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    notes: str = "",
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
            "checkpoints": {k: v for k, v in nb.checkpoints.__dict__.items() if v is not None},
            "stack": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "host": platform.node(),
                "packages": package_versions(),
            },
            "command": {"argv": list(sys.argv), "cwd": os.getcwd()},
            "revisions": {**git_revision(campaign_dir), **task_revision(nb.task.entry, campaign_dir)},
            "protocol": protocol_record(nb),
        }
        if extra:
            frozen["extra"] = extra
        with open(rdir / RUN_FILE, "xb") as fh:  # written once, never rewritten
            tomli_w.dump(frozen, fh)
        nb.runs.append(
            nbm.RunRow(
                id=rid, variant=vid, seed=seed, kind=kind, status=ev.Status.CREATED.value, follows=follows, notes=notes
            )
        )
        box["id"], box["dir"] = rid, rdir

    nbm.mutate(path, add)
    return box["id"], box["dir"]


def apply_state(row: nbm.RunRow, st: RunState) -> bool:
    """Copy what the run folder says into the notebook row. True if anything changed."""
    before = (row.status, row.stop_reason, row.phase, row.started, row.ended, row.peak_mib, row.duration_s)
    row.status = st.status
    row.stop_reason = st.stop_reason or row.stop_reason
    row.phase = st.phase or row.phase
    row.started = fmt_time(st.started) or row.started
    if st.final:
        row.ended = fmt_time(st.ended) or row.ended
        if st.duration_s is not None:
            row.duration_s = round(st.duration_s, 2)
    if st.peak_mib is not None:
        row.peak_mib = round(st.peak_mib, 1)
    after = (row.status, row.stop_reason, row.phase, row.started, row.ended, row.peak_mib, row.duration_s)
    return before != after


def _open(rows: list[nbm.RunRow]) -> list[nbm.RunRow]:
    return [r for r in rows if r.status in (ev.Status.CREATED.value, ev.Status.RUNNING.value)]


def view(nb: nbm.Notebook) -> list[nbm.RunRow]:
    """The notebook's rows with each unfinished one showing what its folder says now. Never writes."""
    out = []
    for row in nb.runs:
        if row in _open(nb.runs) and nb.path is not None:
            rdir = run_dir(nb.directory, row.id) if _valid(row.id) else None
            if rdir is not None and rdir.is_dir():
                row = copy.copy(row)
                apply_state(row, state(rdir))
        out.append(row)
    return out


def _valid(rid: str) -> bool:
    from .files import RUN_ID

    return bool(RUN_ID.match(rid or ""))


def settle(campaign: Path | str) -> nbm.Notebook:
    """Write the final state of every row still marked created or running whose run has ended.

    Called by commands that change the campaign (pilot, series, stop) before
    they act; readers use :func:`view` instead.
    """
    path = nbm.find(campaign)
    nb = nbm.load(path)
    states = {
        r.id: state(run_dir(path.parent, r.id))
        for r in _open(nb.runs)
        if _valid(r.id) and run_dir(path.parent, r.id).is_dir()
    }
    if not any(st.final for st in states.values()):
        return nb

    def update(fresh: nbm.Notebook) -> None:
        for row in _open(fresh.runs):
            st = states.get(row.id)
            if st is not None and st.final:
                apply_state(row, st)

    nbm.mutate(path, update)
    return nbm.load(path)


def settle_run(campaign: Path | str, rdir: Path) -> None:
    """Write one run's state into its notebook row (the run's own last act, rank 0)."""
    st = state(rdir)

    def update(nb: nbm.Notebook) -> None:
        for row in nb.runs:
            if row.id == st.id:
                apply_state(row, st)

    nbm.mutate(campaign, update)
