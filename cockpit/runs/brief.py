"""A run's events in brief: what every reader needs, read in bounded memory and never twice. No torch.

``events.jsonl`` of a long training run holds a step event per update and
background samples: millions of lines. Readers (``runs``, ``compare``,
``report``, the sheet, the plan, the TUI's campaign table) need only a small
part of it, the **summary**:

- every structural event in file order: ``run_start``, ``phase_start``,
  ``gate``, ``run_end`` and any kind this version does not know (at most
  :data:`MAX_KEPT`);
- the last :data:`MAX_EVALS` ``eval`` events and the last :data:`MAX_LOGS` ``log`` events;
- of the ``step`` events, the first and the last of each phase and rank
  (and the largest step number);
- how many events of each kind, how many bad lines, the time of the last event.

**Reading.** The file is opened non-blocking and refused unless it is a
regular file (a FIFO planted in its place never hangs a reader; a symbolic
link is refused), streamed in 1 MiB chunks, and a line longer than
``events.MAX_LINE`` is skipped without being held. Sample lines and step lines
are recognised by a byte test and never decoded: a chunk made of known kinds
is counted with ``bytes.count`` and only its few other lines (and the first
and last step of each phase and rank) are decoded; a chunk with anything else
in it is read line by line. Both ways give the same summary (a test checks).

**Cache.** The summary covers the file up to a byte offset (the end of its
last complete line) and carries the file's inode and the SHA-256 of the
4 KiB before that offset. A later reader whose file still holds those bytes
there reads only what was appended since. The run writes ``summary.json``
into its folder as its last act; a reader that had to parse more than
:data:`WRITE_BACK_BYTES` new bytes writes it back (atomically, best effort:
a read-only folder only costs the next reader the same parse). A process also
keeps the summaries it read, keyed by the file's size and mtime.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import events as ev
from .. import fsutil

SUMMARY_FILE = "summary.json"
FORMAT = 1
MAX_KEPT = 20_000  # structural events (a pilot writes about 30 per rank)
MAX_EVALS = 1_000
MAX_LOGS = 200
MAX_TAILS = 64  # distinct step-line endings remembered for the fast path
PREFIX_BYTES = 4096
WRITE_BACK_BYTES = 1 << 20
MAX_SUMMARY_BYTES = 32 << 20
CHUNK = 1 << 20

# Whole blocks are counted by the compact tags EventWriter writes (a block with any other spelling, or a tag that
# is not the line's own, fails the count and is read line by line through ev.kind_of_line).
_SAMPLE = ev.KIND_TAGS[ev.SAMPLE][0]
_STEP = ev.KIND_TAGS[ev.STEP][0]
_OTHER = re.compile(b"|".join(re.escape(ev.KIND_TAGS[k][0]) for k in ev.KINDS if k not in (ev.SAMPLE, ev.STEP)))
_PHASE = b'"phase":'


@dataclass
class Summary:
    """What a reader needs from a run's events, up to byte ``offset`` of the file."""

    offset: int = 0
    ino: int | None = None
    prefix: str = ""  # SHA-256 of the PREFIX_BYTES before offset
    kept: list[list[Any]] = field(default_factory=list)  # [byte offset, event], file order
    evals: list[list[Any]] = field(default_factory=list)
    logs: list[list[Any]] = field(default_factory=list)
    steps: dict[str, list[list[Any]]] = field(default_factory=dict)  # "phase|rank" -> [[o, first], [o, last]]
    tails: dict[str, str] = field(default_factory=dict)  # a step line's ending (latin-1) -> its key
    counts: dict[str, int] = field(default_factory=dict)
    bad_lines: int = 0
    dropped: int = 0  # structural events past MAX_KEPT, counted only
    last_t: float | None = None
    max_step: int | None = None
    refused: str = ""  # why the file was not read (not a regular file), else ""

    # ---- what readers use

    @property
    def events(self) -> list[ev.Event]:
        """The kept events in file order: what ``cockpit.events`` helpers (gates, iter_kind, last_phase) take."""
        merged = list(self.kept) + list(self.evals) + list(self.logs)
        for pair in self.steps.values():
            merged.append(pair[0])
            if pair[1][0] != pair[0][0]:
                merged.append(pair[1])
        merged.sort(key=lambda oe: oe[0])
        return [e for _, e in merged]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, ev.JSON]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "refused"}
        return {"format": FORMAT, **d}

    @classmethod
    def from_json(cls, d: object) -> Summary | None:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            return None
        try:
            s = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "refused"})
        except TypeError:
            return None
        lists = (s.kept, s.evals, s.logs)
        ok = (
            _int(s.offset)
            and (s.ino is None or _int(s.ino))
            and isinstance(s.prefix, str)
            and all(isinstance(x, list) for x in lists)
            and all(_pair(x) for xs in lists for x in xs)
            and isinstance(s.steps, dict)
            and all(isinstance(p, list) and len(p) == 2 and _pair(p[0]) and _pair(p[1]) for p in s.steps.values())
            and isinstance(s.tails, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in s.tails.items())
            and isinstance(s.counts, dict)
            and all(isinstance(k, str) and _int(v) for k, v in s.counts.items())
            and _int(s.bad_lines)
            and _int(s.dropped)
            and (s.last_t is None or (isinstance(s.last_t, (int, float)) and not isinstance(s.last_t, bool)))
            and (s.max_step is None or _int(s.max_step))
        )
        return s if ok else None

    def copy(self) -> Summary:
        return dataclasses.replace(
            self,
            kept=list(self.kept),
            evals=list(self.evals),
            logs=list(self.logs),
            steps={k: [list(p[0]), list(p[1])] for k, p in self.steps.items()},
            tails=dict(self.tails),
            counts=dict(self.counts),
        )

    # ---- folding events in

    def _count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def _step(self, off: int, e: ev.Event, line: bytes | None) -> None:
        key = f"{e.get('phase') or ''}|{e.get('rank') if e.get('rank') is not None else ''}"
        pair = self.steps.get(key)
        if pair is None:
            self.steps[key] = [[off, e], [off, e]]
        elif off > pair[1][0]:
            pair[1] = [off, e]
        s = e.get("step")
        if isinstance(s, int) and not isinstance(s, bool) and (self.max_step is None or s > self.max_step):
            self.max_step = s
        if line is not None and len(self.tails) < MAX_TAILS:
            i = line.rfind(_PHASE)
            if i >= 0:
                self.tails.setdefault(line[i:].decode("latin-1"), key)

    def _fold(self, off: int, e: ev.Event, line: bytes | None = None) -> None:
        kind = str(e.get("kind"))
        self._count(kind)
        if kind == ev.SAMPLE:
            return
        if kind == ev.STEP:
            self._step(off, e, line)
        elif kind == ev.EVAL:
            self.evals.append([off, e])
            if len(self.evals) > 2 * MAX_EVALS:
                del self.evals[:-MAX_EVALS]
        elif kind == ev.LOG:
            self.logs.append([off, e])
            if len(self.logs) > 2 * MAX_LOGS:
                del self.logs[:-MAX_LOGS]
        elif len(self.kept) < MAX_KEPT:
            self.kept.append([off, e])
        else:
            self.dropped += 1

    # ---- one block of complete lines

    def _lines(self, base: int, block: bytes) -> None:
        """Every line decoded, except samples (byte test): the slow path, and the reference."""
        off = base
        for line in block.split(b"\n")[:-1]:
            start, off = off, off + len(line) + 1
            if ev.kind_of_line(line) == ev.SAMPLE:
                self._count(ev.SAMPLE)
                continue
            e = ev.decode(line) if len(line) <= ev.MAX_LINE else None
            if e is None:
                if line.strip():
                    self.bad_lines += 1
                continue
            self._fold(start, e, line)

    def _fast(self, base: int, block: bytes) -> bool:
        """A block of known kinds, counted rather than decoded; False (nothing folded) when it is not one."""
        n_lines = block.count(b"\n")
        n_sample = block.count(_SAMPLE)
        n_step = block.count(_STEP)
        others: dict[int, bytes] = {}
        for m in _OTHER.finditer(block):
            start = block.rfind(b"\n", 0, m.start()) + 1
            if start not in others:
                others[start] = block[start : block.find(b"\n", m.end())]
        if n_sample + n_step + len(others) != n_lines:
            return False  # a line of another kind, a bad line, or a token nested inside an event
        steps: list[tuple[int, ev.Event, bytes]] = []
        if n_step:
            seen = 0
            for tail, key in self.tails.items():
                needle = tail.encode("latin-1") + b"\n"
                c = block.count(needle)
                if not c:
                    continue
                seen += c
                first, last = block.find(needle), block.rfind(needle)
                for pos in (first, last) if last != first else (first,):
                    start = block.rfind(b"\n", 0, pos) + 1
                    line = block[start : pos + len(needle) - 1]
                    e = ev.decode(line)
                    if e is None or e.get("kind") != ev.STEP or _key(e) != key:
                        return False
                    steps.append((start, e, line))
            if seen != n_step:
                return False  # a step of a phase or rank not seen before: read this block line by line
        decoded = []
        for start in sorted(others):
            line = others[start]
            e = ev.decode(line) if len(line) <= ev.MAX_LINE else None
            if e is None or ev.kind_of_line(line) in (None, ev.SAMPLE, ev.STEP) or ev.kind_of_line(line) != e["kind"]:
                return False
            decoded.append((start, e, line))
        for start, e, line in decoded:
            self._fold(base + start, e, line)
        for start, e, line in sorted(steps, key=lambda x: x[0]):
            self._step(base + start, e, line)
        if n_step:
            self._count(ev.STEP, n_step)
        if n_sample:
            self._count(ev.SAMPLE, n_sample)
        return True

    def feed(self, base: int, block: bytes, fast: bool = True) -> None:
        """Fold in ``block`` (complete lines, each ending with a newline) that starts at byte ``base``."""
        if not block:
            return
        if not (fast and self._fast(base, block)):
            self._lines(base, block)
        del self.evals[:-MAX_EVALS]
        del self.logs[:-MAX_LOGS]
        end = len(block) - 1
        for _ in range(64):  # the time of the last event: the last line that decodes
            nl = block.rfind(b"\n", 0, end)
            e = ev.decode(block[nl + 1 : end]) if end - nl <= ev.MAX_LINE else None
            t = e.get("t") if e is not None else None
            if isinstance(t, (int, float)) and not isinstance(t, bool):
                self.last_t = float(t)
                break
            if nl < 0:
                break
            end = nl


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _pair(x: Any) -> bool:
    """[byte offset, event] as a summary stores it."""
    return isinstance(x, list) and len(x) == 2 and _int(x[0]) and isinstance(x[1], dict)


def _key(e: ev.Event) -> str:
    rank = e.get("rank")
    return f"{e.get('phase') or ''}|{rank if rank is not None else ''}"


# --------------------------------------------------------------------------- reading a file


def _prefix_hash(fh: Any, offset: int) -> str:
    start = max(0, offset - PREFIX_BYTES)
    fh.seek(start)
    return hashlib.sha256(fh.read(offset - start)).hexdigest()


def scan(path: Path | str, base: Summary | None = None, fast: bool = True) -> tuple[Summary, int]:
    """The summary of an events file, continuing ``base`` when the file still holds what it covered.

    Streams the file in chunks; a torn last line is left for the next reader
    (the summary ends at the last complete line). Returns the summary and how
    many bytes were parsed now.
    """
    s = Summary()
    try:
        fh = ev.open_events(path)
    except fsutil.NotAFile as exc:
        s.refused = f"{path}: {exc.strerror}"
        return s, 0
    except OSError:
        return s, 0
    if fh is None:
        return s, 0
    with fh:
        st = os.fstat(fh.fileno())
        if (
            base is not None
            and base.ino == st.st_ino
            and 0 < base.offset <= st.st_size
            and _prefix_hash(fh, base.offset) == base.prefix
        ):
            s = base.copy()
        s.ino = st.st_ino
        begin = pos = s.offset  # pos: the file offset where buf starts
        fh.seek(pos)
        buf = b""
        skip_from: int | None = None  # start of an overlong line being skipped
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                break
            if skip_from is not None:
                nl = chunk.find(b"\n")
                if nl < 0:
                    pos += len(chunk)
                    continue
                s.bad_lines += 1  # the overlong line ended: counted once, never held
                skip_from = None
                pos += nl + 1
                chunk = chunk[nl + 1 :]
            data = buf + chunk
            nl = data.rfind(b"\n")
            if nl >= 0:
                s.feed(pos, data[: nl + 1], fast)
                pos += nl + 1
                buf = data[nl + 1 :]
            else:
                buf = data
            if len(buf) > ev.MAX_LINE:
                skip_from, buf = pos, b""
                pos = fh.tell()
        s.offset = skip_from if skip_from is not None else pos
        s.prefix = _prefix_hash(fh, s.offset)
    return s, s.offset - begin


# --------------------------------------------------------------------------- the cache


_memo: dict[str, tuple[tuple[int, int, int], Summary]] = {}
MEMO_RUNS = 512


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def cached(rdir: Path | str) -> Summary | None:
    """The summary stored in the run folder (``summary.json``), if it is one."""
    try:
        raw = fsutil.read_regular(Path(rdir) / SUMMARY_FILE, MAX_SUMMARY_BYTES)
        return Summary.from_json(json.loads(raw))
    except (OSError, ValueError, RecursionError):
        return None


def save(rdir: Path | str, s: Summary) -> bool:
    """Write ``summary.json`` atomically; False when the folder cannot take it (read-only, full)."""
    if s.refused:
        return False
    try:
        text = json.dumps(s.to_json(), separators=(",", ":"), allow_nan=False, default=str)
        fsutil.write_text(Path(rdir) / SUMMARY_FILE, text)
    except (OSError, ValueError):
        return False
    return True


def summary(rdir: Path | str, write_back: bool = True) -> Summary:
    """The run's summary, read incrementally (see the module's docstring). Never raises for a bad file."""
    rdir = Path(rdir)
    path = rdir / ev.EVENTS_FILE
    key = str(path)
    sig = _signature(path)
    if sig is None:
        _memo.pop(key, None)
        return Summary()
    memo = _memo.get(key)
    if memo is not None and memo[0] == sig:
        return memo[1]
    base = memo[1] if memo is not None else cached(rdir)
    s, parsed = scan(path, base)
    if write_back and parsed >= WRITE_BACK_BYTES:
        save(rdir, s)
    if len(_memo) >= MEMO_RUNS:
        with contextlib.suppress(KeyError, StopIteration):
            del _memo[next(iter(_memo))]
    _memo[key] = (sig, s)
    return s


def write(rdir: Path | str) -> Summary:
    """The run's own last act: bring ``summary.json`` up to date with every event written."""
    s = summary(rdir, write_back=False)
    save(rdir, s)
    return s
