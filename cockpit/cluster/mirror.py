"""A run folder mirrored from a Ray node to the head, in chunks that travel through Ray. No torch, no ray.

The node side (:class:`Mirror`) scans the node-local run folder and says what
changed since its last scan; the head side (:class:`Receiver`) writes each chunk
into the head's run folder, so ``cockpit runs``, ``compare``, the TUI and the
report read a remote run like a local one, from its own folder.

- Files a run appends to (``events.jsonl``, ``output.log``, ``curve.csv``,
  ``evals.csv``) travel as their new bytes, whole lines only where a reader
  parses lines; a file that shrank or was replaced (a resumed run cuts its
  curve back to its checkpoint) travels whole again.
- Every other file (``metrics.json``, ``predictions.jsonl``, checkpoints, the
  artifact) travels whole when its size or time changed, in parts of at most
  :data:`PART` bytes, written on the head to a temporary renamed into place
  with the last part: a reader never sees half a checkpoint. A file the run
  removed (an old checkpoint past ``keep``) is removed on the head too.
- What only makes sense on the node never travels: ``process.json`` (a local
  pid), ``summary.json`` (it names the node's inode), temporaries; nor, towards
  the head, its own records (``remote.json``, ``stop.json``, ``stored.json``).
- With a storage (``[cluster] storage``, a folder the head and the node reach at
  the same path), a periodic checkpoint does not travel: the node copies it
  into the run's folder there and sends a ``stored`` chunk, its path, size and
  sha256, which the head keeps in ``stored.json`` (:mod:`cockpit.runs.stored`).
  A copy that fails (the storage full or gone on that node) sends the
  checkpoint to the head as any file, so the newest one is always reachable.
  The head, not the node, removes a stored checkpoint past ``keep``, when it
  reads its ``rm``: what the head's records name is still in the storage.

The head (:class:`Receiver`) checks every path it is sent: relative, inside the run folder, made of
plain names, never through a link, never one of the head's own records.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .. import events as ev
from .. import fsutil, runs
from ..runs import stored as st_

PART = 8 << 20  # the largest piece of one file in one chunk
APPENDED = {ev.EVENTS_FILE: True, runs.LOG_FILE: False, runs.CURVE_FILE: True, runs.EVALS_FILE: True}  # name: lines
NODE_ONLY = frozenset({runs.PROCESS_FILE, runs.REMOTE_FILE, runs.STOP_FILE, runs.SUMMARY_FILE, st_.STORED_FILE})


@dataclass(frozen=True)
class Chunk:
    """One change of one file: ``append`` (bytes at ``offset``), ``put`` (part of a whole file), ``rm``, or
    ``stored`` (a checkpoint copied into the storage; ``data`` is its :class:`cockpit.runs.stored.StoredEntry`)."""

    op: str
    path: str  # relative to the run folder, "/"-separated
    offset: int = 0
    data: bytes = b""
    last: bool = True  # put: the file's last part


@dataclass
class _Seen:
    ino: int
    size: int
    mtime_ns: int


class Mirror:
    """What changed in a node-local run folder since the last :meth:`scan`."""

    def __init__(self, rdir: Path, store: Path | None = None) -> None:
        self.rdir = Path(rdir)
        self.store = store  # the run's folder in the storage: its periodic checkpoints go there, not to the head
        self.seen: dict[str, _Seen] = {}
        self.store_error = ""  # the last copy into the storage that failed (that checkpoint went to the head)

    def prime(self) -> None:
        """Take the folder as it is as already on the head (the files the head sent to start it)."""
        for rel, st in self._files():
            self.seen[rel] = _Seen(st.st_ino, st.st_size, st.st_mtime_ns)

    def _files(self) -> Iterator[tuple[str, os.stat_result]]:
        for dirpath, dirnames, filenames in os.walk(self.rdir, followlinks=False):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith(".") or (name in NODE_ONLY and dirpath == str(self.rdir)):
                    continue
                path = Path(dirpath) / name
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if not _regular(st):
                    continue  # a link or a FIFO on the node never travels
                yield path.relative_to(self.rdir).as_posix(), st

    def scan(self) -> Iterator[Chunk]:
        """The chunks that bring the head up to date with the folder as it is now."""
        # The folder is listed whole first, then what the run appends to is read (as it is after the listing) and
        # sent before anything else: a checkpoint this scan sends was written before the listing, so the curve and
        # events the head holds reach it, even when the node is lost before the scan's last chunk (the run writes
        # an update's row before that update's checkpoint; a resume then goes on from a curve without a gap).
        listed = sorted(self._files(), key=lambda item: item[0] not in APPENDED)
        present = {rel for rel, _ in listed}
        for rel, st in listed:
            old = self.seen.get(rel)
            lines = APPENDED.get(rel)
            if lines is not None:
                try:
                    st = os.lstat(self.rdir / rel)
                except OSError:
                    continue
            if old is not None and (old.ino, old.size, old.mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns):
                continue
            if lines is not None and old is not None and old.ino == st.st_ino and st.st_size >= old.size:
                data = _read(self.rdir / rel, old.size, st.st_size - old.size)
                if lines:
                    data = data[: data.rfind(b"\n") + 1]  # a torn last line waits for its end
                if data:
                    yield Chunk("append", rel, old.size, data)
                self.seen[rel] = _Seen(st.st_ino, old.size + len(data), st.st_mtime_ns if data else old.mtime_ns)
                continue
            if self.store is not None and lines is None and st_.step_of(rel) is not None:
                chunk = self._store(rel, st)
                if chunk is not None:
                    yield chunk
                    continue
            yield from self._whole(rel, st, lines)
        for rel in [r for r in self.seen if r not in present]:
            del self.seen[rel]
            # a checkpoint past `keep` stays in the storage until the head reads this chunk and removes it there:
            # the node runs ahead of what the head has read, and a node lost before its last chunks arrive must
            # not have removed the checkpoints the head's records (and so a resume) still name
            yield Chunk("rm", rel)

    def _store(self, rel: str, stat_: os.stat_result) -> Chunk | None:
        """Copy a checkpoint into the storage; its record as a chunk, or None (the copy failed: it goes whole)."""
        assert self.store is not None
        dst = self.store / rel
        h = hashlib.sha256()
        size = 0
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            with fsutil.open_regular(self.rdir / rel) as fh, fsutil.atomic_writer(dst) as out:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
                    out.write(block)
                    size += len(block)
        except OSError as exc:
            self.store_error = f"{dst}: {exc.strerror or exc}"
            return None
        self.seen[rel] = _Seen(stat_.st_ino, size, stat_.st_mtime_ns if size == stat_.st_size else -1)
        entry: st_.StoredEntry = {"path": str(dst), "size": size, "sha256": h.hexdigest()}
        return Chunk("stored", rel, data=json.dumps(entry).encode())

    def _whole(self, rel: str, st: os.stat_result, lines: bool | None) -> Iterator[Chunk]:
        try:
            with fsutil.open_regular(self.rdir / rel) as fh:
                data = fh.read(st.st_size)
        except OSError:
            return  # gone between the walk and the read (a checkpoint rotated): the next scan says so
        if lines:
            data = data[: data.rfind(b"\n") + 1]
        parts = [data[i : i + PART] for i in range(0, len(data), PART)] or [b""]
        for i, part in enumerate(parts):
            yield Chunk("put", rel, i * PART, part, last=i == len(parts) - 1)
        size = len(data)
        self.seen[rel] = _Seen(st.st_ino, size, st.st_mtime_ns if size == st.st_size else -1)


def _regular(st: os.stat_result) -> bool:
    import stat

    return stat.S_ISREG(st.st_mode)


def _read(path: Path, offset: int, size: int) -> bytes:
    with fsutil.open_regular(path) as fh:
        fh.seek(offset)
        return fh.read(size)


class BadChunk(ValueError):
    """A chunk the head refuses: a path that leaves the run folder, goes through a link or names a head record."""


def target(rdir: Path, rel: str) -> Path:
    """Where a chunk's path lands in the head's run folder, or :class:`BadChunk`."""
    parts = rel.split("/")
    if (
        not rel
        or rel.startswith("/")
        or any(not p or p in (".", "..") or p.startswith(".") or "\\" in p or "\0" in p for p in parts)
        or (len(parts) == 1 and parts[0] in NODE_ONLY)
    ):
        raise BadChunk(f"refused a file from the node: {rel!r} is not a plain path inside the run folder")
    here = Path(rdir)
    for p in parts[:-1]:
        here = here / p
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            raise BadChunk(f"refused a file from the node: {rel!r} goes through {here}, not a folder of the run")
        here.mkdir(exist_ok=True)
    out = here / parts[-1]
    if out.is_symlink():
        raise BadChunk(f"refused a file from the node: {out} is a link")
    return out


class Receiver:
    """The head's side of one run's mirror: writes each chunk into the run's folder (the series is its only writer).

    A file sent whole in several parts is written through :func:`cockpit.fsutil.atomic_writer`, held open from its
    first part to its last: it appears whole under its name or not at all, and a series killed in between leaves
    only a temporary that the next sweep removes.
    """

    def __init__(self, rdir: Path, store: Path | None = None) -> None:
        self.rdir = Path(rdir)
        self.store = store  # the run's folder in the storage, where its node copies its checkpoints (None: none)
        self.open: dict[str, tuple[contextlib.AbstractContextManager[IO[bytes]], IO[bytes]]] = {}

    def apply(self, chunk: Chunk) -> None:
        path = target(self.rdir, chunk.path)
        if chunk.op == "stored":
            self._stored(chunk)
            return
        if chunk.op == "rm":
            self._drop(chunk.path)
            entries = st_.stored(self.rdir)
            gone = entries.pop(chunk.path, None)
            if gone is not None:
                st_.write_stored(self.rdir, entries)
                if self.store is not None and Path(gone["path"]) == self.store / chunk.path:  # this run's own file
                    with contextlib.suppress(OSError):
                        os.unlink(gone["path"])
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        if chunk.op == "append":
            flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(path, flags, 0o644)
            try:
                if os.fstat(fd).st_size > chunk.offset:  # a part the node sent again: it replaces what follows it
                    os.ftruncate(fd, chunk.offset)
                os.pwrite(fd, chunk.data, chunk.offset)
            finally:
                os.close(fd)
            return
        if chunk.op != "put":
            raise BadChunk(f"refused a chunk from the node: unknown operation {chunk.op!r}")
        if chunk.offset == 0:
            self._drop(chunk.path)
            cm: contextlib.AbstractContextManager[IO[bytes]] = fsutil.atomic_writer(path)
            self.open[chunk.path] = (cm, cm.__enter__())
        elif chunk.path not in self.open:
            raise BadChunk(f"refused a part of {chunk.path!r} at {chunk.offset}: its first part never came")
        cm, fh = self.open[chunk.path]
        fh.write(chunk.data)
        if chunk.last:
            del self.open[chunk.path]
            cm.__exit__(None, None, None)  # fsync and rename into place

    def _stored(self, chunk: Chunk) -> None:
        """A checkpoint the node copied into the storage: its record kept in ``stored.json``."""
        try:
            e = json.loads(chunk.data)
        except ValueError:
            e = None
        if (
            st_.step_of(chunk.path) is None
            or not isinstance(e, dict)
            or not isinstance(e.get("path"), str)
            or self.store is None
            or Path(e["path"]) != self.store / chunk.path
            or not isinstance(e.get("size"), int)
            or not isinstance(e.get("sha256"), str)
        ):
            raise BadChunk(
                f"refused a stored record of {chunk.path!r}: not a checkpoint's size and sha256 at its path in "
                f"this run's storage ({self.store or 'the series has no [cluster] storage'})"
            )
        entries = st_.stored(self.rdir)
        entries[chunk.path] = {"path": e["path"], "size": e["size"], "sha256": e["sha256"]}
        st_.write_stored(self.rdir, entries)

    def _drop(self, rel: str) -> None:
        held = self.open.pop(rel, None)
        if held is not None:  # a file the node sent again from its start: the half written is thrown away
            held[0].__exit__(BadChunk, BadChunk("superseded"), None)

    def close(self) -> None:
        """Throw away the files still half received (their node was lost mid-file)."""
        for rel in list(self.open):
            self._drop(rel)
