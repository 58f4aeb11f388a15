"""Writing ``campaign.toml``: one function, under a lock, atomically, never over someone else's change.

Saving takes an advisory lock on the campaign folder, refuses to overwrite a
file that changed on disk since it was read, writes a temporary file in the
same folder, fsyncs it and moves it over the old one. Comments are not kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tomli_w

from .. import fsutil
from .model import LOCK_FILE, NOTEBOOK_FILE, SECTIONS, ConflictError, Notebook, NotebookError
from .parse import find, from_data, load, parse, read_bytes


def validate(nb: Notebook) -> None:
    """Re-check an in-memory notebook (after an edit) before it is saved: the same checks as a load,
    on the values it would write (tomli_w writes them as they are, so no TOML round trip is needed)."""
    from_data(to_dict(nb), nb.path or NOTEBOOK_FILE)


def to_dict(nb: Notebook) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in SECTIONS:
        value = getattr(nb, key)
        if isinstance(value, list):
            if value:  # an empty array of tables would be written as "runs = []" above every table
                out[key] = [_strip_none(dataclasses.asdict(v)) for v in value]
        else:
            out[key] = _strip_none(dataclasses.asdict(value))
    return out


def _strip_none(d: dict[str, Any]) -> dict[str, Any]:
    # TOML has no null: a key that is None is simply left out, and loads back as None.
    return {k: v for k, v in d.items() if v is not None}


def dumps(nb: Notebook) -> str:
    header = (
        "# Cockpit campaign notebook. Cockpit rewrites this file when it saves: comments are not\n"
        "# kept; write free text in the notes fields instead.\n"
    )
    return header + tomli_w.dumps(to_dict(nb), multiline_strings=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Advisory lock on the campaign folder, held while reading and replacing the file."""
    import fcntl

    lock_path = path.parent / LOCK_FILE
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise _write_error(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write_error(path: Path, exc: OSError) -> NotebookError:
    """A failed write of the notebook (or its lock), as one paragraph: disk full, permissions, anything else."""
    if fsutil.disk_full(exc) is not None:
        return NotebookError(
            f"{path}: disk full: no space left on the device; the notebook was not changed. "
            "Free space and run the command again."
        )
    if isinstance(exc, PermissionError):
        return NotebookError(
            f"{exc.filename or path}: permission denied; Cockpit needs to write the campaign folder "
            f"{path.parent} (its notebook and lock file). Fix the permissions and run the command again."
        )
    return NotebookError(f"{exc.filename or path}: cannot be written ({exc.strerror or exc}); nothing was saved.")


def _digest_on_disk(path: Path) -> str | None:
    if not path.exists():
        return None
    return hashlib.sha256(read_bytes(path)).hexdigest()


def _sweep_temporaries(path: Path) -> None:
    # Every writer holds the lock, so a temporary file seen under it belongs
    # to a writer that was killed before its os.replace: it is garbage.
    for tmp in path.parent.glob(".campaign.*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def _write_atomic(path: Path, text: str) -> None:
    # the notebook keeps its own mode; the folder is synced too, so the rename survives a power cut
    fsutil.write_text(path, text, sync_dir=True)


def save(nb: Notebook, path: Path | str | None = None, *, force_new: bool = False) -> None:
    """Write the notebook atomically, under the lock.

    Refuses (ConflictError) when the file on disk is not the one this notebook
    was read from, so two editors never silently lose each other's work.
    ``force_new`` is for creating a file that must not exist yet.
    """
    target = Path(path) if path else nb.path
    if target is None:
        raise NotebookError("save: no path given and the notebook was not loaded from a file")
    validate(nb)  # never write a notebook that would not load back
    text = dumps(nb)
    with locked(target):
        _save_locked(nb, target, text, force_new)


def _save_locked(nb: Notebook, target: Path, text: str, force_new: bool = False) -> None:
    current = _digest_on_disk(target)
    if force_new:
        if current is not None:
            raise ConflictError(f"{target}: already exists; choose another name.")
    elif current != nb.digest:
        raise ConflictError(
            f"{target}: the file changed on disk since it was read (another editor, the CLI or a "
            f"pilot wrote it). Nothing was saved. Reload it and make the change again."
        )
    _sweep_temporaries(target)
    try:
        _write_atomic(target, text)
    except OSError as exc:
        raise _write_error(target, exc) from None
    nb.path = target
    nb.digest = hashlib.sha256(text.encode("utf-8")).hexdigest()


def create(path: Path | str, text: str) -> Notebook:
    """Write a new notebook from its text as given (a template keeps its layout).

    Refuses (ConflictError) when the file exists already; never writes text
    that does not load.
    """
    target = Path(path)
    nb = parse(text, target)
    with locked(target):
        if target.exists():
            raise ConflictError(f"{target}: already exists; Cockpit never overwrites a notebook.")
        _sweep_temporaries(target)
        try:
            _write_atomic(target, text)
        except OSError as exc:
            raise _write_error(target, exc) from None
    nb.path = target
    nb.digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return nb


def mutate(path: Path | str, change: Callable[[Notebook], Any], *, read: Notebook | None = None) -> Any:
    """Read-modify-write under the lock: load the newest file, apply ``change``, save.

    For writers that must not fail on another editor's change (a pilot
    updating its run row): they merge into whatever is on disk now. When
    ``read`` is the notebook the caller just loaded and the file has not
    changed since, it is used instead of parsing the file again (it is then
    changed in place). When ``change`` returns ``False`` it changed nothing
    and nothing is written.
    """
    p = find(path)
    with locked(p):
        if read is not None and read.path == p and read.digest is not None and _digest_on_disk(p) == read.digest:
            nb = read
        else:
            nb = load(p)
        result = change(nb)
        if result is False:
            return result
        validate(nb)
        _save_locked(nb, p, dumps(nb))
    return result


def template(name: str) -> str:
    from importlib import resources

    text = resources.files("cockpit").joinpath("templates/campaign.toml").read_text("utf-8")
    return text.replace("{name}", name)
