"""The README is a guide that holds true: its two commands, its size, its picture, its links, and its walk-through: the
tests that start processes or load models (the rest: tests/unit/test_docs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_docs import ROOT, walkthrough


@pytest.mark.slow  # seconds: a model load or a fresh process
def test_the_docs_build_with_warnings_as_errors(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "pilot" / "index.html").is_file()


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """From an empty folder, every line of the README's walk-through, in order, each exiting 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "100"}
    for argv in walkthrough():
        proc = subprocess.run(
            [sys.executable, "-m", "cockpit", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        assert proc.returncode == 0, (
            f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    assert (tmp_path / "campaigns" / "mine" / "report" / "report.md").is_file()
