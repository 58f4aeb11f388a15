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
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import tomli_w

from .. import events as ev
from .. import fsutil
from .. import notebook as nbm
from ..gitinfo import run_revision as git_revision
from ..notebook.settings import TomlValue
from . import brief
from .files import ARTIFACT_DIR, RUN_FILE, RunToml, check_id, fmt_time, now, order_key, run_dir, runs_dir
from .state import RunState, state


def _next_id(nb: nbm.Notebook, campaign_dir: Path) -> str:
    taken = {r.id for r in nb.runs if _valid(r.id)}
    rd = runs_dir(campaign_dir)
    if rd.is_dir():
        taken |= {p.name for p in rd.iterdir() if _valid(p.name)}
    n = max((order_key(t)[0] for t in taken), default=0)
    return f"r{max(n, 0) + 1:04d}"


def _sweep_partial(rd: Path) -> None:
    """Half-made run folders (``.rNNNN.<random>.tmp``) of a launcher killed while creating one.
    Called under the notebook lock, which every creator holds: whoever made them is gone."""
    if not rd.is_dir():
        return
    for p in rd.glob(".r*.tmp"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


# the libraries a task brings (Hugging Face, PEFT, Lightning): recorded when installed, left out when not
OPTIONAL_PACKAGES = (
    "transformers",
    "tokenizers",
    "safetensors",
    "peft",
    "accelerate",
    "lightning",
    "pytorch-lightning",
    "torchvision",
)


def package_versions(
    names: tuple[str, ...] = ("torch", "cockpit", "numpy", "nvidia-ml-py", "psutil"),
    optional: tuple[str, ...] = OPTIONAL_PACKAGES,
) -> dict[str, str]:
    """Installed versions, read from metadata: no import of torch needed."""
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    for name in optional:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


class GitRevision(TypedDict, total=False):
    """The commit of the folder holding the campaign (or why there is none), and whether its tracked files differ."""

    git: str
    dirty: bool


class TaskRevision(TypedDict, total=False):
    """A hash of the task's code and the file it is in ("not found" when the entry names no file)."""

    task_code: str
    task_file: str


def protocol_record(nb: nbm.Notebook) -> dict[str, Any]:
    from ..notebook.protocol import record

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


def task_revision(entry: str, campaign_dir: Path) -> TaskRevision:
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
    overrides: Mapping[str, TomlValue] | None = None,
    extra: Mapping[str, TomlValue] | None = None,
    notes: str = "",
    read: nbm.Notebook | None = None,
) -> tuple[str, Path]:
    """Allocate a new run id (never reused), write its frozen run.toml and its notebook row.

    ``read``: the notebook the caller just loaded (or settled); used as it is when the file has not
    changed since, so a large notebook is not parsed twice.

    Both happen under the notebook lock, so two launchers never take the same id.
    The folder is written whole under a temporary name and renamed into place;
    if the row cannot be saved (a full disk), the folder is removed again, so
    there is never a run folder without its row and no id is used up.
    """
    import tempfile

    path = nbm.find(campaign)
    campaign_dir = path.parent
    made: list[tuple[str, Path]] = []  # the id and folder once made, so a failed save can remove the folder

    def add(nb: nbm.Notebook) -> None:
        vid = variant or nb.reference.id
        nb.variant(vid)  # raises a clear error for an unknown variant
        if kind != "probe":
            nb.needs_task(f"a {kind} run")
        if follows:
            check_id(follows)
            nb.run(follows)
        rid = _next_id(nb, campaign_dir)
        rdir = run_dir(campaign_dir, rid)
        # A probe's settings are the script's own (its command line), never a variant's or a template's.
        params = {} if kind == "probe" else nb.params(vid)
        params.update(overrides or {})
        frozen: RunToml = {
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
            frozen["extra"] = dict(extra)
        text = tomli_w.dumps(frozen)
        rdir.parent.mkdir(parents=True, exist_ok=True)
        _sweep_partial(rdir.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{rid}.", suffix=".tmp", dir=rdir.parent))
        try:
            with open(tmp / RUN_FILE, "x", encoding="utf-8") as fh:  # written once, never rewritten
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o755)
            os.rename(tmp, rdir)  # refuses (never replaces) an existing folder
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        made.append((rid, rdir))
        nb.runs.append(
            nbm.RunRow(
                id=rid, variant=vid, seed=seed, kind=kind, status=ev.Status.CREATED.value, follows=follows, notes=notes
            )
        )

    try:
        nbm.mutate(path, add, read=read)
    except BaseException as exc:
        if made:  # the row was not saved: no folder without its row, no id used up
            shutil.rmtree(made[-1][1], ignore_errors=True)
        full = fsutil.disk_full(exc)
        if full is not None:
            raise nbm.NotebookError(
                f"{campaign_dir}: disk full: no space left on the device while creating a run "
                f"({full.filename or 'runs/'}); nothing was created. Free space and start it again."
            ) from None
        raise
    return made[-1]


def apply_state(row: nbm.RunRow, st: RunState) -> bool:
    """Copy what the run folder says into the notebook row. True if anything changed."""
    before = (row.status, row.stop_reason, row.phase, row.started, row.ended, row.peak_mib, row.duration_s)
    row.status = str(st.status)
    row.stop_reason = str(st.stop_reason or row.stop_reason)
    row.phase = str(st.phase or row.phase)
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


def _gone(rid: str) -> RunState:
    """The state of a row whose run folder is not there (deleted, moved, or an id that names no folder)."""
    return RunState(
        rid,
        Path(rid),
        ev.Status.CRASHED.value,
        None,
        "run folder missing: it was deleted or moved while the run was open; its row keeps what was recorded",
        None,
        None,
        None,
        "",
    )


def _state_of_row(campaign_dir: Path, row: nbm.RunRow) -> RunState:
    if not _valid(row.id):
        return _gone(row.id)
    rdir = run_dir(campaign_dir, row.id)
    if not rdir.is_dir() or rdir.is_symlink():
        return _gone(row.id)
    return state(rdir)


def view(nb: nbm.Notebook) -> list[nbm.RunRow]:
    """The notebook's rows with each unfinished one showing what its folder says now. Never writes.

    A ``running`` row whose folder is gone shows as crashed, a ``created`` row
    whose launcher died before starting its process shows as crashed once the
    grace period has passed: the next writing command (:func:`settle`) records
    the same.
    """
    out = []
    open_rows = {id(r) for r in _open(nb.runs)}
    for row in nb.runs:
        if id(row) in open_rows and nb.path is not None:
            row = copy.copy(row)
            apply_state(row, _state_of_row(nb.directory, row))
        out.append(row)
    return out


def _valid(rid: str) -> bool:
    from .files import RUN_ID

    return isinstance(rid, str) and bool(RUN_ID.match(rid))


def sweep(rdir: Path) -> list[Path]:
    """Remove the temporaries of atomic writes that a killed run left in its folder (checkpoint, export)."""
    if rdir.is_symlink() or not rdir.is_dir():
        return []
    gone = fsutil.sweep_all(rdir)
    art = rdir / ARTIFACT_DIR
    if art.is_dir() and not art.is_symlink():
        gone += fsutil.sweep_all(art)
    return gone


def settle(campaign: Path | str) -> nbm.Notebook:
    """Write the final state of every row still marked created or running whose run has ended.

    Called by commands that change the campaign (pilot, series, stop) before
    they act; readers use :func:`view` instead. The folders of the runs it
    settles are swept of the temporaries their killed writers left.
    """
    path = nbm.find(campaign)
    nb = nbm.load(path)
    states = {r.id: _state_of_row(path.parent, r) for r in _open(nb.runs)}
    final = {rid: st for rid, st in states.items() if st.final}
    if not final:
        return nb
    for st in final.values():
        if st.dir.is_absolute():
            sweep(st.dir)

    box: dict[str, nbm.Notebook] = {}

    def update(fresh: nbm.Notebook) -> bool:
        box["nb"] = fresh
        changed = False
        for row in _open(fresh.runs):
            st = final.get(row.id)
            if st is not None:
                changed = apply_state(row, st) or changed
        return changed  # False: nothing to write

    nbm.mutate(path, update, read=nb)
    return box["nb"]


def settle_run(campaign: Path | str, rdir: Path) -> None:
    """Write one run's state into its notebook row (the run's own last act, rank 0); no write when it holds it already."""
    st = state(rdir)

    def update(nb: nbm.Notebook) -> bool:
        changed = False
        for row in nb.runs:
            if row.id == st.id:
                changed = apply_state(row, st) or changed
        return changed

    nbm.mutate(campaign, update)


def finish_run(campaign: Path | str, rdir: Path) -> None:
    """The run's own last acts (rank 0): its notebook row, its events' summary, its folder swept.

    The row first: on a disk that filled up, the room the run set aside goes to what matters most.
    """
    try:
        settle_run(campaign, rdir)
    finally:
        brief.write(rdir)
        if state(rdir).final:  # every rank has ended: no writer of this folder is left
            sweep(rdir)
