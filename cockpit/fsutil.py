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
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def temp_prefix(name: str) -> str:
    return f".{name}."


def _temporary_name(path: Path) -> str:
    return str(path.parent / f"{temp_prefix(path.name)}{secrets.token_hex(8)}.tmp")


@contextlib.contextmanager
def atomic_writer(path: Path | str, mode: int | None = None, sync_dir: bool = False) -> Iterator[IO[bytes]]:
    """Yield a binary file; on a clean exit it replaces ``path`` whole, else it vanishes."""
    path = Path(path)
    tmp = ""
    try:
        # The temporary is named before it exists and made inside this ``try``: a stop raised between any two
        # bytecodes (where a signal handler runs) finds its name already bound and removes the file. With
        # ``mkstemp`` a stop landing after the file was made but before its name was bound left it behind.
        for _ in range(100):
            tmp = _temporary_name(path)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
                break
            except FileExistsError:
                tmp = ""  # another writer's: never ours to remove
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))
        if mode is None:
            try:
                mode = path.stat().st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o644
        os.fchmod(fd, mode)  # made private (0600) like mkstemp's
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp:
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


def sha256(path: Path | str, follow: bool = True) -> str:
    """The SHA-256 of a regular file, read in 1 MiB chunks (exports and archives alike).

    A FIFO, a device or a folder is refused (:class:`NotAFile`) instead of read
    forever; with ``follow=False`` a symbolic link is refused too.
    """
    h = hashlib.sha256()
    with open_regular(path, follow=follow) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- reading what others may have planted


class NotAFile(OSError):
    """Not a regular file (a FIFO, a device, a folder) or, where links are refused, a symbolic link."""


class TooLarge(OSError):
    """A file larger than the reader's limit."""


def open_regular(path: Path | str, follow: bool = False) -> IO[bytes]:
    """Open a regular file for reading without ever blocking on it.

    The file is opened non-blocking (a FIFO with no writer would otherwise
    hang the reader for ever) and refused unless it is a regular file; with
    ``follow=False`` (the default) a symbolic link is refused too, so a link
    planted in a run folder never makes Cockpit read a file outside it.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise NotAFile(errno.ELOOP, "a symbolic link, not read (links are never followed)", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a file"
            raise NotAFile(errno.EINVAL, f"{what}, not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, limit: int, follow: bool = False) -> bytes:
    """The whole of a small regular file, refused (:class:`TooLarge`) past ``limit`` bytes."""
    with open_regular(path, follow=follow) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(errno.EFBIG, f"larger than {limit:,} bytes", str(path))
    return data


def is_regular(path: Path | str) -> bool:
    """A regular file and not a symbolic link (lstat: the link itself is looked at)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


# --------------------------------------------------------------------------- a full disk, named as such

DISK_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None)


def disk_full(exc: BaseException | None) -> OSError | None:
    """The "no space left on device" error behind ``exc``, if any (torch wraps it in a RuntimeError)."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return exc
        if "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc):
            return exc if isinstance(exc, OSError) else OSError(errno.ENOSPC, str(exc))
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def temporaries(folder: Path | str) -> list[Path]:
    """Every temporary of an atomic write in ``folder`` (``.NAME.<random>.tmp``), links left out."""
    out: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for entry in entries:
        if entry.name.startswith(".") and entry.name.endswith(".tmp") and entry.is_file(follow_symlinks=False):
            out.append(Path(entry.path))
    return out


def sweep_all(folder: Path | str) -> list[Path]:
    """Remove every temporary in ``folder`` left by a killed atomic writer; only when no writer is alive."""
    gone = []
    for tmp in temporaries(folder):
        with contextlib.suppress(OSError):
            tmp.unlink()
            gone.append(tmp)
    return gone


# --------------------------------------------------------------------------- room for the last word

_reserves: list[Path] = []


def reserve(path: Path | str, size: int = 256 << 10) -> bool:
    """Set ``size`` bytes of disk aside in ``path`` (a ``.*.tmp`` name, so a sweep removes it if left behind).

    A run process keeps one from its start; when the disk fills, :func:`release` gives that room back
    so the run can still write its final event and its notebook row. False when there is no room already.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        return False
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except (AttributeError, OSError):
            os.write(fd, b"\0" * size)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        return False
    os.close(fd)
    _reserves.append(path)
    return True


def release() -> None:
    """Give back the room set aside by :func:`reserve` (a full disk: the run's last writes need it)."""
    while _reserves:
        with contextlib.suppress(OSError):
            _reserves.pop().unlink()
