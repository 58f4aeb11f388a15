"""Every file of a run folder, by name, and how each is read. No torch.

A run lives in ``campaigns/<campaign>/runs/<run-id>/``. This module is the one
place that names its files and reads them; everything else (the CLI, the TUI,
the sheet, compare, the plan, the report, the archive) asks here.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import re
from pathlib import Path
from typing import Any

from .. import events as ev

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


def read_run_toml(rdir: Path | str) -> dict[str, Any]:
    import tomllib

    with open(Path(rdir) / RUN_FILE, "rb") as fh:
        return tomllib.load(fh)


def run_meta(rdir: Path | str) -> dict[str, Any]:
    """The ``[run]`` table of run.toml, or {} when it cannot be read."""
    try:
        return dict(read_run_toml(rdir).get("run", {}))
    except (OSError, ValueError):
        return {}


def read_json(path: Path | str) -> dict[str, Any]:
    """A small JSON document written by Cockpit, or {} when absent or unreadable."""
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_metrics(rdir: Path | str) -> dict[str, Any]:
    return read_json(Path(rdir) / METRICS_FILE)


def read_inspect(rdir: Path | str) -> dict[str, Any]:
    return read_json(Path(rdir) / INSPECT_FILE)


def read_events(rdir: Path | str) -> list[dict[str, Any]]:
    return ev.read_events(Path(rdir) / EVENTS_FILE)


def read_csv_rows(path: Path | str) -> list[dict[str, float | None]]:
    """A run's curve.csv or evals.csv as rows of floats (None for empty or unparsable cells)."""
    out: list[dict[str, float | None]] = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                out.append({k: _float(v) for k, v in row.items() if k is not None})
    except (OSError, csv.Error):
        return out
    return out


def read_series(path: Path | str, column: str) -> list[tuple[float, float]]:
    """(step, value) pairs of one column of a run's CSV, non-finite and empty cells left out."""
    out = []
    for row in read_csv_rows(path):
        s, v = row.get("step"), row.get(column)
        if s is not None and v is not None and v == v and abs(v) != float("inf"):
            out.append((s, v))
    return out


def _float(v: str | None) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except ValueError:
        return None
