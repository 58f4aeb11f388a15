"""``stored.json``: a remote run's checkpoints kept in the notebook's ``[cluster] storage``, not its folder. No torch.

With ``[cluster] storage = "/mnt/shared/cockpit"`` (a folder the head and every node reach at that path: a
provider's shared volume, NFS), a series on Ray does not stream a run's periodic checkpoints back to the head: the
node writes each one into the run's own folder there (:func:`storage_dir`) and sends only its record, which the
head keeps here, path by path (``checkpoints/update-8.pt`` -> where it is, its size and sha256). Everything else
of the run (events, curve, metrics, the export) still comes back to the head's folder.

The run's checkpoints are then the union of its folder's and this record's (:func:`checkpoint_steps`), newest last;
a resume takes the newest wherever it is: a node copies it from the storage, a resume on the head copies it into
the run's folder first (:func:`bring_back`), after checking its digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TypedDict, cast

from .. import fsutil
from .files import CHECKPOINTS_DIR

STORED_FILE = "stored.json"


class StoredEntry(TypedDict):
    """One checkpoint of the run, kept in the storage."""

    path: str  # absolute, the same on the head and on every node
    size: int
    sha256: str


def storage_dir(storage: str | Path, campaign: Path, rid: str) -> Path:
    """The run's folder in the storage: named after its campaign folder and that folder's place on the head, so two
    campaigns of one name on two heads never share one."""
    camp = Path(campaign).resolve()
    camp = camp.parent if camp.suffix == ".toml" else camp
    key = hashlib.sha256(str(camp).encode()).hexdigest()[:10]
    return Path(storage).expanduser() / f"{camp.name}-{key}" / rid


def stored(rdir: Path | str) -> dict[str, StoredEntry]:
    """The run's checkpoints in the storage, by their path in the run folder ({} when none, or unreadable)."""
    try:
        doc = json.loads(fsutil.read_regular(Path(rdir) / STORED_FILE, 1 << 20))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(doc, dict):
        return {}
    out: dict[str, StoredEntry] = {}
    for rel, e in doc.items():
        if (
            isinstance(rel, str)
            and isinstance(e, dict)
            and isinstance(e.get("path"), str)
            and isinstance(e.get("size"), int)
            and isinstance(e.get("sha256"), str)
        ):
            out[rel] = cast(StoredEntry, e)
    return out


def write_stored(rdir: Path | str, entries: dict[str, StoredEntry]) -> None:
    """The record as it is now (the head's keeper is its only writer)."""
    path = Path(rdir) / STORED_FILE
    if not entries:
        path.unlink(missing_ok=True)
        return
    fsutil.write_text(path, json.dumps(dict(sorted(entries.items())), indent=1))


def step_of(rel: str) -> int | None:
    """The update of a periodic checkpoint's path in the run folder (``checkpoints/update-8.pt`` -> 8), or None."""
    prefix, name = f"{CHECKPOINTS_DIR}/", rel.rsplit("/", 1)[-1]
    if not rel.startswith(prefix) or rel.count("/") != 1 or not name.startswith("update-") or not name.endswith(".pt"):
        return None
    step = name[len("update-") : -len(".pt")]
    return int(step) if step.isdigit() else None


def checkpoint_steps(rdir: Path | str) -> list[tuple[int, str, str]]:
    """(update, path in the run folder, where it is) of every periodic checkpoint of the run, oldest first: those
    in its folder (where = "") and those in the storage (where = the stored path); the folder's copy wins a tie."""
    rdir = Path(rdir)
    found: dict[int, tuple[str, str]] = {}
    for rel, e in stored(rdir).items():
        step = step_of(rel)
        if step is not None and os.path.isfile(e["path"]):  # a storage not mounted here: not reachable
            found[step] = (rel, e["path"])
    d = rdir / CHECKPOINTS_DIR
    if d.is_dir():
        for p in d.glob("update-*.pt"):
            rel = f"{CHECKPOINTS_DIR}/{p.name}"
            step = step_of(rel)
            if step is not None and p.is_file() and not p.is_symlink():
                found[step] = (rel, "")
    return [(s, rel, where) for s, (rel, where) in sorted(found.items())]


def file_digest(path: Path | str) -> str:
    h = hashlib.sha256()
    with fsutil.open_regular(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class StorageError(OSError):
    """A stored checkpoint that cannot be read back as it was written: gone, or not the same bytes."""


def bring_back(rdir: Path | str, rel: str) -> Path:
    """Copy a stored checkpoint into the run's folder (a resume on the head), its digest checked first."""
    rdir = Path(rdir)
    e = stored(rdir).get(rel)
    if e is None:
        raise StorageError(f"{rdir / STORED_FILE}: no stored copy of {rel}")
    src = Path(e["path"])
    try:
        got = file_digest(src)
    except OSError as exc:
        raise StorageError(f"{src}: the stored copy of {rel} cannot be read here ({exc.strerror or exc})") from None
    if got != e["sha256"]:
        raise StorageError(f"{src}: the stored copy of {rel} is not the one the run wrote (sha256 {got[:12]}...)")
    dst = rdir / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    with fsutil.open_regular(src) as fh, fsutil.atomic_writer(dst) as out:
        shutil.copyfileobj(fh, out, 1 << 20)
    return dst
