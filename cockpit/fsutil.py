"""Writing files so that a reader never sees half of one. No torch.

Every file Cockpit writes whole (the notebook, run.toml's neighbours,
metrics.json, inspect.json, checkpoints, manifests) goes through
:func:`atomic_writer`: a temporary file with a name of its own in the same
folder (two writers of one file never share a temporary), fsync, then
``os.replace``. A writer killed at any moment leaves the old file or the new
one; its temporary is named ``.<name>.<random>.tmp`` so :func:`sweep` can
find and remove it later.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def temp_prefix(name: str) -> str:
    return f".{name}."


@contextlib.contextmanager
def atomic_writer(path: Path | str, mode: int | None = None, sync_dir: bool = False) -> Iterator[IO[bytes]]:
    """Yield a binary file; on a clean exit it replaces ``path`` whole, else it vanishes."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        if mode is None:
            try:
                mode = path.stat().st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o644
        os.fchmod(fd, mode)  # mkstemp makes the file private (0600)
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if sync_dir:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def write_bytes(path: Path | str, data: bytes, sync_dir: bool = False) -> int:
    with atomic_writer(path, sync_dir=sync_dir) as fh:
        fh.write(data)
    return len(data)


def write_text(path: Path | str, text: str, sync_dir: bool = False) -> int:
    return write_bytes(path, text.encode("utf-8"), sync_dir=sync_dir)


def sweep(folder: Path | str, name: str) -> list[Path]:
    """Remove the temporaries that killed writers of ``folder/name`` left behind."""
    gone = []
    for tmp in Path(folder).glob(f"{temp_prefix(name)}*.tmp"):
        if tmp.is_symlink() or not tmp.is_file():
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            gone.append(tmp)
    return gone


def sha256(path: Path | str) -> str:
    """The SHA-256 of a file, read in 1 MiB chunks (exports and archives alike)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
