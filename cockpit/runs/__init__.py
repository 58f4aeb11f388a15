"""Run folders: the one place that knows them. No torch.

- :mod:`.files`   every file name of a run, how each is read, run-id order and validation
- :mod:`.process` ``process.json``: whether the run's process lives and is ours to signal
- :mod:`.state`   status derived from events, the one rule for "the peak", a run read as one record,
                  "the latest passed pilot of a variant"
- :mod:`.rows`    the notebook's ``[[runs]]`` rows: written at creation and at the end, read through ``view``
"""

from __future__ import annotations

from .files import (
    ARTIFACT_DIR,
    CHECKPOINT,
    CURVE_COLUMNS,
    CURVE_FILE,
    EVALS_FILE,
    EVENTS_FILE,
    INSPECT_FILE,
    LOG_FILE,
    METRICS_FILE,
    PREDICTIONS_FILE,
    PROCESS_FILE,
    REPLAY_FILE,
    RESUME_FILE,
    RUN_FILE,
    RUN_ID,
    RUNS_DIR,
    BadRunId,
    check_id,
    fmt_time,
    now,
    order_key,
    read_csv_rows,
    read_events,
    read_inspect,
    read_json,
    read_metrics,
    read_run_toml,
    read_series,
    run_dir,
    run_dirs,
    run_meta,
    runs_dir,
)
from .process import is_alive, owned, process_info, write_process
from .rows import apply_state, create_run, git_revision, package_versions, settle, settle_run, view
from .state import (
    GPU_PEAK,
    HOST_PEAK,
    RunFiles,
    RunState,
    campaign_runs,
    latest_passed_pilot,
    list_runs,
    mem_peak,
    peak_of,
    read_run,
    state,
    training_runs,
)

__all__ = [
    "ARTIFACT_DIR", "CHECKPOINT", "CURVE_COLUMNS", "CURVE_FILE", "EVALS_FILE", "EVENTS_FILE", "GPU_PEAK",
    "HOST_PEAK", "INSPECT_FILE", "LOG_FILE", "METRICS_FILE", "PREDICTIONS_FILE", "PROCESS_FILE", "REPLAY_FILE",
    "RESUME_FILE", "RUNS_DIR", "RUN_FILE", "RUN_ID", "BadRunId", "RunFiles", "RunState", "apply_state",
    "campaign_runs", "check_id", "create_run", "fmt_time", "git_revision", "is_alive", "latest_passed_pilot",
    "list_runs", "mem_peak", "now", "order_key", "owned", "package_versions", "peak_of", "process_info",
    "read_csv_rows", "read_events", "read_inspect", "read_json", "read_metrics", "read_run", "read_run_toml",
    "read_series", "run_dir", "run_dirs", "run_meta", "runs_dir", "settle", "settle_run", "state",
    "training_runs", "view", "write_process",
]
