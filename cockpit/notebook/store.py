"""Writing ``campaign.toml``: one function, under a lock, atomically, never over someone else's change.

Saving takes an advisory lock on the campaign folder, refuses to overwrite a
file that changed on disk since it was read, writes a temporary file in the
same folder, fsyncs it and moves it over the old one. Comments are not kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w

from .. import fsutil

try:  # the C encoder behind json.dumps, without its per-call overhead
    from json.encoder import c_encode_basestring as _json_string  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    from json.encoder import py_encode_basestring as _json_string
from .model import (
    LOCK_FILE,
    NOTEBOOK_FILE,
    PROBE_OPTIONAL,
    SECTIONS,
    ConflictError,
    Notebook,
    NotebookError,
    PilotSpec,
)
from .parse import CACHE_FILE, CACHE_MIN_BYTES, find, from_data, load, parse, read_bytes

if TYPE_CHECKING:
    from _typeshed import DataclassInstance  # the type checker's name for "an instance of any dataclass"


def validate(nb: Notebook) -> None:
    """Re-check an in-memory notebook (after an edit) before it is saved: the same checks as a load,
    on the values it would write (tomli_w writes them as they are, so no TOML round trip is needed)."""
    from_data(to_dict(nb), nb.path or NOTEBOOK_FILE)


def to_dict(nb: Notebook) -> dict[str, object]:
    """The notebook as the TOML document it is written as: a table per section, an array of tables per list."""
    out: dict[str, object] = {}
    for key in SECTIONS:
        value = getattr(nb, key)
        if value is None:  # an optional section not set up (e.g. [probe]): not written
            continue
        if nb.is_probe and (key in PROBE_OPTIONAL or (key == "pilot" and value == PilotSpec())):
            continue  # a probe campaign's stand-in sections are not settings, and the pilot's gates do not run on it
        if isinstance(value, list):
            if value:  # an empty array of tables would be written as "runs = []" above every table
                out[key] = [_table(v) for v in value]
        else:
            out[key] = _table(value)
    return out


_NAMES: dict[type, tuple[str, ...]] = {}


def _table(obj: DataclassInstance) -> dict[str, object]:
    """One section as a dict: its fields, a None left out (TOML has no null: it loads back as None).

    Faster than ``dataclasses.asdict`` (which deep-copies through every value), which matters for a
    notebook with 200,000 decisions; lists and dicts are copied one level deep, as sections hold them.
    """
    cls = type(obj)
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("path", "digest"))
    out: dict[str, object] = {}
    for name in names:
        v = getattr(obj, name)
        if v is None:
            continue
        if isinstance(v, list):
            v = [dict(x) if isinstance(x, dict) else x for x in v]
        elif isinstance(v, dict):
            v = {k: (list(x) if isinstance(x, list) else dict(x) if isinstance(x, dict) else x) for k, x in v.items()}
        out[name] = v
    return out


HEADER = (
    "# Cockpit campaign notebook. Cockpit rewrites this file when it saves: comments are not\n"
    "# kept; write free text in the notes fields instead.\n"
)
FAST_ROWS = 200  # past this many [[runs]] or [[decisions]], they are written by _rows (tomli_w is slow)


def dumps(nb: Notebook) -> str:
    return dumps_data(to_dict(nb))


def dumps_data(data: Mapping[str, object]) -> str:
    """The notebook's TOML. Long arrays of rows are appended as ``[[name]]`` blocks written here, about ten
    times faster than tomli_w (which writes the rest, and any array holding a value these blocks do not know)."""
    rest = dict(data)
    blocks = []
    for key in ("runs", "decisions"):
        rows = rest.get(key)
        if isinstance(rows, list) and len(rows) > FAST_ROWS:
            written = _rows(key, rows)
            if written is not None:
                blocks.append(written)
                del rest[key]
    return HEADER + tomli_w.dumps(rest, multiline_strings=True) + "".join(blocks)


_BARE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _rows(key: str, rows: list[object]) -> str | None:
    """``[[key]]`` blocks for flat rows; None when a row holds anything else (then tomli_w writes them)."""
    out = []
    for row in rows:
        if not isinstance(row, dict):
            return None
        out.append(f"\n[[{key}]]\n")
        for k, v in row.items():
            if not k or not set(k) <= _BARE:
                return None
            value = _scalar(v)
            if value is not None:
                out.append(f"{k} = {value}\n")
            elif isinstance(v, str):  # a string with line breaks: tomli_w writes it readable, as """..."""
                out.append(tomli_w.dumps({k: v}, multiline_strings=True))
            else:
                return None
    return "".join(out)


def _scalar(v: Any) -> str | None:
    """A TOML value for a string without a line break, a number, a boolean or an array of those; else None."""
    t = type(v)
    if t is str:
        if "\n" in v or "\r" in v:
            return None  # tomli_w writes it as a multi-line string, readable in the file
        # A JSON string is a TOML basic string (the same escapes), except that TOML also forbids a raw DEL.
        out: str = _json_string(v)
        return out.replace("\x7f", "\\u007f") if "\x7f" in out else out
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return repr(v)  # inf, -inf, nan and 1e-05 are TOML as Python writes them
    if t is list:
        items = [_scalar(x) for x in v]
        if any(x is None or type(y) is list for x, y in zip(items, v, strict=True)):
            return None
        return "[" + ", ".join(items) + "]" if items else "[]"  # type: ignore[arg-type]
    return None


# A copy of the notebook's values as JSON, keyed by the SHA-256 of the TOML it was written with: loading
# a large notebook from it skips the TOML parser (pure Python, about 5 s for 200,000 decisions). Written
# only by a save (never by a read), only for notebooks past CACHE_MIN_BYTES; a file that differs from the
# one written (edited by hand) simply does not match and is parsed as TOML.
def _write_cache(target: Path, text: str, data: Mapping[str, object] | None) -> None:
    cache = target.parent / CACHE_FILE
    raw = text.encode("utf-8")
    if data is None or len(raw) < CACHE_MIN_BYTES:
        with contextlib.suppress(OSError):
            if fsutil.is_regular(cache):
                cache.unlink()
        return
    try:
        blob = json.dumps({"format": 1, "sha256": hashlib.sha256(raw).hexdigest(), "data": data}, allow_nan=False)
        fsutil.write_text(cache, blob)
    except (OSError, ValueError, TypeError):
        with contextlib.suppress(OSError):
            cache.unlink()


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
    data = to_dict(nb)
    from_data(data, target)  # never write a notebook that would not load back
    text = dumps_data(data)
    with locked(target):
        _save_locked(nb, target, text, force_new, data)


def _save_locked(
    nb: Notebook, target: Path, text: str, force_new: bool = False, data: Mapping[str, object] | None = None
) -> None:
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
    _write_cache(target, text, data)
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
        data = to_dict(nb)
        from_data(data, p)  # never write a notebook that would not load back
        _save_locked(nb, p, dumps_data(data), data=data)
    return result


def template(name: str, which: str = "campaign") -> str:
    """A notebook to start from: ``campaign`` (a new campaign around task.py) or ``demo`` (the built-in demo)."""
    from importlib import resources

    text = resources.files("cockpit").joinpath(f"templates/{which}.toml").read_text("utf-8")
    if which == "demo":
        return text.replace('name = "demo"', f"name = {name!r}".replace("'", '"'), 1)
    return text.replace("{name}", name)


def task_template(name: str) -> str:
    """task.py for a new campaign: runnable as written, each function saying what it must return."""
    from importlib import resources

    return resources.files("cockpit").joinpath("templates/task.py.tmpl").read_text("utf-8").replace("{name}", name)
