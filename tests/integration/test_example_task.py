"""The docs' task example (docs/tasks.md) is the file the example campaign pilots, and it passes every gate."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

ROOT = Path(__file__).resolve().parents[2]


def test_readme_lists_the_example_file_verbatim():
    readme = (ROOT / "docs" / "tasks.md").read_text()
    block = readme.split("<!-- example-task:start -->\n```python\n", 1)[1].split("```\n<!-- example-task:end -->", 1)[0]
    assert block == (ROOT / "campaigns" / "example" / "my_task.py").read_text()


def test_example_campaign_pilot_passes(tmp_path):
    camp = tmp_path / "example"
    shutil.copytree(ROOT / "campaigns" / "example", camp, ignore=shutil.ignore_patterns("runs", ".campaign.lock"))
    out = subprocess.run(
        [sys.executable, "-m", "cockpit", "pilot", str(camp), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["status"] == "passed", (data["stop_reason"], out.stderr[-2000:])
    assert {g["phase"] for g in data["gates"]} >= {"data", "leakage", "overfit", "resume", "export"}
