"""Run folders read once and kept while their files do not change. No textual.

The campaign table and the compare screen both need every run of the
campaign as :class:`cockpit.runs.RunFiles` (its run.toml, its status by the
rules of :func:`cockpit.runs.state`, its gates, its metrics.json). Read as
the CLI reads them, a run's whole ``events.jsonl`` is decoded, samples and
logs included, every time; here a finished run is read once and kept with the
stamp of its files (size and modification time of events.jsonl, metrics.json
and run.toml), and only the events that a state, a gate table or compare
uses are decoded: run_start, phase_start, gate, run_end, the last eval, and
the last step (a pilot's every step: compare reads its step time per phase). Samples, logs and the other steps (the bulk of a file) are passed
over by a byte search on the event's kind, which the writer puts at the start
of every line.

A running run is not read here at all: its one incremental reader
(``feeds.Feeds``) follows it. Thread-safe: workers of several screens share
one cache.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import events as ev
from .. import runs
from ..schema import Event
from .ingest import safe_state

if TYPE_CHECKING:
    from .comparedata import ComparisonReading

Stamp = tuple[tuple[int, int] | None, ...]  # size and modification time of each file a run is read from

_SKIPPED = (ev.SAMPLE, ev.LOG, ev.STEP, ev.EVAL)
_LAST_KEPT = (ev.STEP, ev.EVAL)  # of these only the last one is decoded


def _skipped_kind(raw: bytes) -> str | None:
    """The kind of a line this cache can skip without decoding it, read by the one fast reader of event kinds."""
    kind = ev.kind_of_line(raw)
    return kind if kind in _SKIPPED else None


def slim_events(path: Path, steps: bool = False) -> tuple[list[Event], int]:
    """The events of a file that describe its run (not samples, logs, nor steps but the last), and bad lines.

    ``steps``: keep every step (a pilot has few, and compare reads its step times per phase).
    The last line of the file is always decoded, so the time of the last event
    (a crashed run's end) is the file's.
    """
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return [], 0
    lines = data.split(b"\n")
    if lines and lines[-1] != b"":
        lines.pop()  # a torn last line: not complete yet
    kept: list[tuple[int, Event]] = []
    last: dict[str, tuple[int, bytes]] = {}
    bad = 0
    final = -1
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        final = i
        kind = _skipped_kind(raw)
        if kind == ev.STEP and steps:
            kind = None
        if kind is not None:
            if kind in _LAST_KEPT:
                last[kind] = (i, raw)
            continue
        event = ev.decode(raw)
        if event is None:
            bad += 1
            continue
        kept.append((i, event))
    for i, raw in last.values():
        event = ev.decode(raw)
        if event is not None:
            kept.append((i, event))
    kept.sort(key=lambda pair: pair[0])  # file order: the rules read events in the order they were written
    out = [e for _, e in kept]
    if final >= 0 and (not kept or kept[-1][0] != final):
        event = ev.decode(lines[final])
        if event is not None and isinstance(event.get("t"), (int, float)):
            out.append({"kind": "tail", "t": event["t"]})  # a sample or a log: only its time counts
    return out, bad


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@dataclass(frozen=True)
class Cached:
    stamp: Stamp
    files: runs.RunFiles
    bad_lines: int


class RunCache:
    """``RunFiles`` per run folder, read again only when one of its files changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[Path, Cached] = {}
        # The last comparison read (comparedata.ComparisonReading), shown at once when compare opens while it
        # is read again; read ahead by the campaign screen after its runs changed.
        self.compared: ComparisonReading | None = None

    def stamp(self, rdir: Path) -> Stamp:
        return (
            _stamp(rdir / runs.EVENTS_FILE),
            _stamp(rdir / runs.METRICS_FILE),
            _stamp(rdir / runs.RUN_FILE),
        )

    def get(self, rdir: Path) -> Cached | None:
        """What is kept for the folder, whatever its files say now."""
        with self._lock:
            return self._runs.get(Path(rdir))

    def read(self, rdir: Path) -> runs.RunFiles | None:
        """The run as ``runs.read_run`` reads it (slim events), from the cache when nothing changed.

        None when its run.toml cannot be read (as ``runs.read_run``).
        """
        rdir = Path(rdir)
        stamp = self.stamp(rdir)
        with self._lock:
            hit = self._runs.get(rdir)
        if hit is not None and hit.stamp == stamp:
            if hit.files.state is not None and hit.files.state.final:
                return hit.files
            # Not final: the files did not change, but whether its process lives may have.
            st = safe_state(rdir, hit.files.events)
            files = _with_state(hit.files, st)
            self._keep(rdir, Cached(stamp, files, hit.bad_lines))
            return files
        try:
            frozen = runs.read_run_toml(rdir)
        except (OSError, ValueError):
            return None
        kind = frozen.get("run", {}).get("kind", "pilot") if isinstance(frozen.get("run"), dict) else "pilot"
        evs, bad = slim_events(rdir / runs.EVENTS_FILE, steps=kind == "pilot")
        metrics = runs.read_metrics(rdir) or None
        files = build(rdir, frozen, evs, metrics)
        self._keep(rdir, Cached(stamp, files, bad))
        return files

    def _keep(self, rdir: Path, cached: Cached) -> None:
        with self._lock:
            self._runs[rdir] = cached

    def forget(self, rdir: Path) -> None:
        with self._lock:
            self._runs.pop(Path(rdir), None)


def build(
    rdir: Path,
    frozen: runs.RunToml,
    evs: list[Event],
    metrics: ev.Metrics | None,
    state: runs.RunState | None = None,
) -> runs.RunFiles:
    """A RunFiles from what was read, with its state by ``runs.state`` (the one rule) unless given."""
    st = state if state is not None else safe_state(rdir, evs)
    meta = frozen.get("run", {})
    if not isinstance(meta, dict):
        meta = {}
    try:
        seed = int(meta.get("seed", 0))
    except (TypeError, ValueError):
        seed = 0
    return runs.RunFiles(
        id=str(meta.get("id", rdir.name)),
        dir=rdir,
        kind=str(meta.get("kind", "pilot")),
        variant=str(meta.get("variant", "")),
        seed=seed,
        status=st.status,
        stop_reason=st.stop_reason,
        phase=st.phase,
        frozen=frozen,
        events=evs,
        metrics=metrics,
        state=st,
    )


def _with_state(files: runs.RunFiles, st: runs.RunState) -> runs.RunFiles:
    return runs.RunFiles(
        id=files.id,
        dir=files.dir,
        kind=files.kind,
        variant=files.variant,
        seed=files.seed,
        status=st.status,
        stop_reason=st.stop_reason,
        phase=st.phase,
        frozen=files.frozen,
        events=files.events,
        metrics=files.metrics,
        state=st,
    )


class Listing:
    """The campaign's run folders (as ``runs.run_dirs``), listed again only when ``runs/`` changed.

    Adding or removing a folder changes the modification time of ``runs/``; a folder whose
    run.toml is not written yet is looked at again at every call until it is. A file system with
    coarse times could hide two changes in one tick: the folder is listed anew every
    ``relist_every`` calls whatever its time says. One thread at a time (the scan's worker).
    """

    def __init__(self, campaign_dir: Path, relist_every: int = 15) -> None:
        self.campaign_dir = Path(campaign_dir)
        self.relist_every = relist_every
        self._stamp: int | None = None
        self._names: list[str] = []
        self._valid: set[str] = set()
        self._calls = 0

    def dirs(self) -> list[Path]:
        rd = runs.runs_dir(self.campaign_dir)
        try:
            stamp = os.stat(rd).st_mtime_ns
        except OSError:
            self._stamp, self._names, self._valid = None, [], set()
            return []
        self._calls += 1
        if stamp != self._stamp or self._calls % self.relist_every == 0:
            try:
                with os.scandir(rd) as it:
                    names = [e.name for e in it if runs.RUN_ID.match(e.name) and e.is_dir(follow_symlinks=False)]
            except OSError:
                return []
            self._names = sorted(names, key=runs.order_key)
            self._valid &= set(names)
            self._stamp = stamp
        out: list[Path] = []
        for name in self._names:
            p = rd / name
            if name not in self._valid:
                if not (p / runs.RUN_FILE).is_file():
                    continue  # being made: looked at again next time
                self._valid.add(name)
            out.append(p)
        return out
