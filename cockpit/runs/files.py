"""Every file of a run folder, by name, and how each is read. No torch.

A run lives in ``campaigns/<campaign>/runs/<run-id>/``. This module is the one
place that names its files and reads them; everything else (the CLI, the TUI,
the sheet, compare, the plan, the report, the archive) asks here.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TypedDict, cast

from .. import events as ev
from .. import fsutil
from ..contract import Params
from ..notebook.settings import TomlValue

RUNS_DIR = "runs"
RUN_FILE = "run.toml"  # frozen at creation: task, variant, parameters, seed, stack, command
PROCESS_FILE = "process.json"  # the detached process: pid, start time, command line
REMOTE_FILE = "remote.json"  # a run on another node (a Ray task): its task, node, heartbeat, how it ended
STOP_FILE = "stop.json"  # a remote run: `cockpit stop` asks the head's series to stop it (its grace)
LOG_FILE = "output.log"  # the run's stdout and stderr
EVENTS_FILE = ev.EVENTS_FILE  # append-only events: the source of truth
CURVE_FILE = "curve.csv"  # training run: one row per update
EVALS_FILE = "evals.csv"  # training run: one row per validation
PREDICTIONS_FILE = "predictions.jsonl"  # training run: the last validation's predictions
METRICS_FILE = "metrics.json"  # training run: final and best values, times, peak
INSPECT_FILE = "inspect.json"  # pilot: examples as the loss receives them (data gate)
CHECKPOINT = "checkpoint.pt"  # resume checkpoint (pilot: after two updates; training: the last one)
CHECKPOINTS_DIR = "checkpoints"  # training run: the periodic checkpoints it resumes from
ARTIFACT_DIR = "artifact"  # exported evaluation artifact: weights, control outputs, manifest
RESUME_FILE = "resume.json"  # pilot: what the resumed process found
REPLAY_FILE = "replay.json"  # pilot: what the replaying process found

CURVE_COLUMNS = ("step", "loss", "lr", "grad_norm", "examples_seen", "elapsed_s")

# Run ids are made by Cockpit ("r0001"); anything else in a path or a file is refused,
# so an id can never name a folder outside runs/.
RUN_ID = re.compile(r"^r[0-9]{4,9}$")


class BadRunId(ValueError):
    """A run id that Cockpit did not make (it could name a path outside runs/)."""


def check_id(rid: str) -> str:
    if not isinstance(rid, str) or not RUN_ID.match(rid):
        raise BadRunId(f"{rid!r} is not a run id: run ids look like r0001 (the letter r and digits)")
    return rid


def now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def fmt_time(t: float | None) -> str:
    if t is None:
        return ""
    return _dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def runs_dir(campaign_dir: Path | str) -> Path:
    return Path(campaign_dir) / RUNS_DIR


def run_dir(campaign_dir: Path | str, run_id: str) -> Path:
    return runs_dir(campaign_dir) / check_id(run_id)


def order_key(rid: str) -> tuple[int, str]:
    """Run ids in the order they were made: r0002 before r0010; anything else first."""
    return (int(rid[1:]) if rid[1:].isdigit() else -1, rid)


def run_dirs(campaign_dir: Path | str) -> list[Path]:
    """The campaign's run folders (those with a run.toml), oldest first."""
    rd = runs_dir(campaign_dir)
    if not rd.is_dir():
        return []
    found = [
        p
        for p in rd.iterdir()
        if RUN_ID.match(p.name) and p.is_dir() and not p.is_symlink() and (p / RUN_FILE).is_file()
    ]
    return sorted(found, key=lambda p: order_key(p.name))


MAX_SMALL_FILE = 64 << 20  # run.toml, metrics.json, inspect.json, process.json: Cockpit writes them small


class RunTable(TypedDict, total=False):
    """run.toml's ``[run]``: what the run is."""

    id: str
    campaign: str
    variant: str
    seed: int
    kind: str  # pilot, train, probe
    follows: str  # the run this one resumes or continues, "" if none
    created: str


class TaskTable(TypedDict, total=False):
    entry: str
    extensions: list[str]


class Revisions(TypedDict, total=False):
    """run.toml's ``[revisions]``: the campaign folder's git commit and the task code's hash."""

    git: str  # the commit, or why there is none
    dirty: bool
    task_code: str
    task_file: str


class RunToml(TypedDict, total=False):
    """A run's frozen ``run.toml``, written once by :func:`cockpit.runs.rows.create_run` and never rewritten.

    The settings tables are the notebook's at the run's creation, with None left out: ``params`` is the flat
    mapping the task's functions receive (:data:`cockpit.contract.Params`); ``pilot``, ``stop``, ``validation`` and
    ``checkpoints`` are the notebook's sections of those names; ``extra`` is what the launcher adds (a probe's
    command)."""

    run: RunTable
    task: TaskTable
    params: Params
    pilot: Mapping[str, TomlValue]
    stop: Mapping[str, TomlValue]
    validation: Mapping[str, TomlValue]
    checkpoints: Mapping[str, TomlValue]
    stack: Mapping[str, TomlValue]
    command: Mapping[str, TomlValue]
    revisions: Revisions
    protocol: Mapping[str, TomlValue]
    extra: Mapping[str, TomlValue]


def read_run_toml(rdir: Path | str) -> RunToml:
    """The frozen run.toml. Raises OSError (absent, not a regular file, a link, too large) or ValueError."""
    from ..notebook.parse import tomllib  # tomli on Python 3.10

    raw = fsutil.read_regular(Path(rdir) / RUN_FILE, MAX_SMALL_FILE)
    try:
        return cast(RunToml, tomllib.loads(raw.decode("utf-8")))
    except RecursionError:
        raise ValueError(f"{Path(rdir) / RUN_FILE}: nested too deeply") from None


def run_meta(rdir: Path | str) -> RunTable:
    """The ``[run]`` table of run.toml, or {} when it cannot be read."""
    try:
        return read_run_toml(rdir).get("run", {})
    except (OSError, ValueError):
        return {}


def read_json(path: Path | str, limit: int = MAX_SMALL_FILE) -> dict[str, ev.JSON]:
    """A small JSON document written by Cockpit, or {} when absent, unreadable, not a regular file
    (a FIFO, a link: never followed out of the run folder) or larger than ``limit``."""
    try:
        data = json.loads(fsutil.read_regular(path, limit))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def read_metrics(rdir: Path | str) -> ev.Metrics:
    """A training run's metrics.json, or {} when it has none (yet) or it cannot be read."""
    return cast(ev.Metrics, read_json(Path(rdir) / METRICS_FILE))


def read_inspect(rdir: Path | str) -> dict[str, ev.JSON]:
    return read_json(Path(rdir) / INSPECT_FILE)


def read_events(rdir: Path | str) -> list[ev.Event]:
    """Every event of the run, in memory: for small runs and tests; readers of a campaign use the summary."""
    return ev.read_events(Path(rdir) / EVENTS_FILE)


def read_csv_rows(path: Path | str) -> list[dict[str, float | None]]:
    """A run's curve.csv or evals.csv as rows of floats (None for empty or unparsable cells)."""
    return list(iter_csv_rows(path))


def iter_csv_rows(path: Path | str) -> Iterator[dict[str, float | None]]:
    """The rows of a run's CSV one at a time (regular files only, a link never followed)."""
    import io

    try:
        raw = fsutil.open_regular(path)
    except OSError:
        return
    with raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="") as fh:
        try:
            for row in csv.DictReader(fh):
                yield {k: _float(v) for k, v in row.items() if isinstance(k, str)}
        except (OSError, csv.Error):
            return


MAX_POINTS = 4096
FULL_READ_BYTES = 8 << 20  # a CSV up to this size is read whole; a larger one is sampled


def read_series(path: Path | str, column: str, max_points: int = MAX_POINTS) -> list[tuple[float, float]]:
    """(step, value) pairs of one column of a run's CSV, non-finite and empty cells left out, for a chart.

    Bounded whatever the run's length: steps are gathered in buckets of a
    width (a power of two) that keeps at most ``max_points`` of them, each
    point the mean of its bucket at the bucket's first step (runs of the same
    length bucket alike, so their curves average step by step). A file up to
    ``FULL_READ_BYTES`` is read whole (with up to ``max_points`` rows, every
    row is its own point, as written); a larger one (a run with millions of
    updates) is sampled: ``4 x max_points`` rows read at evenly spaced
    offsets, so reading it costs the same for 10 thousand or 10 million rows.
    """
    try:
        size = os.lstat(path).st_size
    except OSError:
        return []
    if size <= FULL_READ_BYTES:
        rows: Iterator[dict[str, float | None]] = iter_csv_rows(path)
        last = None
    else:
        rows, last = _sampled_rows(path, size, 4 * max_points, ("step", column))
    width = 1
    if last is not None:
        while last / width > max_points:
            width *= 2
    buckets: dict[int, list[float]] = {}  # bucket -> [sum of values, count]
    for row in rows:
        s, v = row.get("step"), row.get(column)
        if s is None or v is None or not math.isfinite(v) or not math.isfinite(s):
            continue
        b = int(s) // width
        acc = buckets.get(b)
        if acc is None:
            buckets[b] = [v, 1.0]
            if len(buckets) > max_points:
                width *= 2
                merged: dict[int, list[float]] = {}
                for k, (tot, n) in buckets.items():
                    m = merged.setdefault(k // 2, [0.0, 0.0])
                    m[0] += tot
                    m[1] += n
                buckets = merged
        else:
            acc[0] += v
            acc[1] += 1
    return [(float(b * width) if width > 1 else float(b), tot / n) for b, (tot, n) in sorted(buckets.items())]


def _sampled_rows(
    path: Path | str, size: int, n: int, columns: tuple[str, ...]
) -> tuple[Iterator[dict[str, float | None]], float | None]:
    """``columns`` of the rows of a large CSV read at ``n`` evenly spaced byte offsets, and the last row's step."""
    try:
        fh = fsutil.open_regular(path)
    except OSError:
        return iter(()), None
    with fh:
        header = fh.readline(65536).decode("utf-8", "replace")
        names = next(csv.reader([header]), [])
        start = fh.tell()
        lines = []
        for i in range(n):
            fh.seek(start + (size - start) * i // n)
            if i:
                fh.readline(65536)  # the rest of the line the offset fell into
            line = fh.readline(65536)
            if line.endswith(b"\n"):
                lines.append(line.decode("utf-8", "replace"))
        fh.seek(max(start, size - 65536))
        tail = fh.read().decode("utf-8", "replace").splitlines()
    keep = [(i, k) for i, k in enumerate(names) if k in columns]
    rows = ({k: _float(r[i]) if i < len(r) else None for i, k in keep} for r in csv.reader(lines))
    last_rows = [r for r in csv.reader(tail[-2:]) if len(r) == len(names)]
    last = _float(dict(zip(names, last_rows[-1], strict=False)).get("step")) if last_rows else None
    return iter(rows), last


def _float(v: str | None) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except ValueError:
        return None
