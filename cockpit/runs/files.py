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
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import events as ev
from .. import fsutil

RUNS_DIR = "runs"
RUN_FILE = "run.toml"  # frozen at creation: task, variant, parameters, seed, stack, command
PROCESS_FILE = "process.json"  # the detached process: pid, start time, command line
LOG_FILE = "output.log"  # the run's stdout and stderr
EVENTS_FILE = ev.EVENTS_FILE  # append-only events: the source of truth
CURVE_FILE = "curve.csv"  # training run: one row per update
EVALS_FILE = "evals.csv"  # training run: one row per validation
PREDICTIONS_FILE = "predictions.jsonl"  # training run: the last validation's predictions
METRICS_FILE = "metrics.json"  # training run: final and best values, times, peak
INSPECT_FILE = "inspect.json"  # pilot: examples as the loss receives them (data gate)
CHECKPOINT = "checkpoint.pt"  # resume checkpoint (pilot: after two updates; training: the last one)
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


def read_run_toml(rdir: Path | str) -> dict[str, Any]:
    """The frozen run.toml. Raises OSError (absent, not a regular file, a link, too large) or ValueError."""
    import tomllib

    raw = fsutil.read_regular(Path(rdir) / RUN_FILE, MAX_SMALL_FILE)
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{Path(rdir) / RUN_FILE}: nested too deeply") from None


def run_meta(rdir: Path | str) -> dict[str, Any]:
    """The ``[run]`` table of run.toml, or {} when it cannot be read."""
    try:
        return dict(read_run_toml(rdir).get("run", {}))
    except (OSError, ValueError):
        return {}


def read_json(path: Path | str, limit: int = MAX_SMALL_FILE) -> dict[str, Any]:
    """A small JSON document written by Cockpit, or {} when absent, unreadable, not a regular file
    (a FIFO, a link: never followed out of the run folder) or larger than ``limit``."""
    try:
        data = json.loads(fsutil.read_regular(path, limit))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def read_metrics(rdir: Path | str) -> dict[str, Any]:
    return read_json(Path(rdir) / METRICS_FILE)


def read_inspect(rdir: Path | str) -> dict[str, Any]:
    return read_json(Path(rdir) / INSPECT_FILE)


def read_events(rdir: Path | str) -> list[dict[str, Any]]:
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


def read_series(path: Path | str, column: str, max_points: int = MAX_POINTS) -> list[tuple[float, float]]:
    """(step, value) pairs of one column of a run's CSV, non-finite and empty cells left out.

    Streamed, and bounded: past ``max_points`` rows, neighbouring steps are
    averaged into buckets of a width that doubles as needed (each point is the
    mean of its bucket, at the bucket's first step), so a run with millions of
    updates costs constant memory and runs of the same length bucket alike.
    """
    width = 1
    buckets: dict[int, list[float]] = {}  # bucket -> [sum of values, count, first step]
    for row in iter_csv_rows(path):
        s, v = row.get("step"), row.get(column)
        if s is None or v is None or not math.isfinite(v) or not math.isfinite(s):
            continue
        b = int(s) // width
        acc = buckets.get(b)
        if acc is None:
            buckets[b] = [v, 1.0, s]
            if len(buckets) > max_points:
                width *= 2
                merged: dict[int, list[float]] = {}
                for k, (tot, n, first) in buckets.items():
                    m = merged.get(k // 2)
                    if m is None:
                        merged[k // 2] = [tot, n, first]
                    else:
                        m[0] += tot
                        m[1] += n
                        m[2] = min(m[2], first)
                buckets = merged
        else:
            acc[0] += v
            acc[1] += 1
    return [(first, tot / n) for _, (tot, n, first) in sorted(buckets.items())]


def _float(v: str | None) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except ValueError:
        return None
