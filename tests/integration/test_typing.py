"""The strict type check on the core records: the event schema, the run folders, the notebook, the settings and
the accumulation loop. ``mypy --strict`` (which holds disallow_any_generics, disallow_untyped_defs and
warn_return_any) on these paths; the rest of the package is checked by the project's own mypy settings in CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRICT = [
    "cockpit/events.py",
    "cockpit/schema.py",
    "cockpit/contract.py",
    "cockpit/runs",
    "cockpit/notebook",
    "cockpit/pilot/microsteps.py",
]


@pytest.mark.slow
def test_core_records_pass_mypy_strict() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary", *STRICT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
