"""The tested environment is the user's: what ``./setup.sh test`` builds runs every documented example as it is: the
tests that start processes or load models (the rest: tests/unit/test_environment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_environment import DOCUMENTED, ROOT, fresh_python, repairs


@pytest.mark.slow  # fresh interpreters importing transformers, PEFT and Lightning
def test_every_documented_integration_imports_in_a_fresh_interpreter(tmp_path: Path) -> None:
    proc = fresh_python(DOCUMENTED, tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.slow  # seconds: a model load or a fresh process
def test_no_test_repairs_a_third_party_package() -> None:
    files = sorted((ROOT / "tests").rglob("*.py"))
    assert len(files) > 20
    assert not [f for f in files if f.name == "sitecustomize.py"], "a sitecustomize in tests/ changes every process"
    found = [hit for f in files for hit in repairs(f)]
    assert not found, "tests may not repair a third-party package:\n" + "\n".join(found)
