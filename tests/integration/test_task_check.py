"""What a newcomer's first mistakes get: ``cockpit check`` imports the task and sizes its splits in a child process,
``cockpit pilot`` refuses before a run exists, and a run that meets the same mistake names it instead of blaming
Cockpit (issue 24, items 4 and 5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from cockpit import runs
from tests.fake_runs import make_campaign

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def cockpit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=300
    )


def with_task(camp: Path, source: str) -> Path:
    (camp / "task.py").write_text(source)
    toml = camp / "campaign.toml"
    toml.write_text(toml.read_text().replace('"cockpit.tasks.tinylm:task"', '"task.py:task"'))
    return camp


def set_params(camp: Path, **params: object) -> None:
    import tomllib

    doc = tomllib.loads((camp / "campaign.toml").read_text())
    doc["task"]["params"].update(params)
    (camp / "campaign.toml").write_text(tomli_w.dumps(doc))


def no_run_made(camp: Path) -> bool:
    return not (camp / "runs").exists() or not any((camp / "runs").iterdir())


@pytest.mark.slow  # imports the task in a child process, as check and pilot do
@pytest.mark.parametrize("command", ["check", "pilot"])
def test_a_task_file_that_does_not_parse_is_named_with_its_line(tmp_path: Path, command: str) -> None:
    camp = with_task(make_campaign(tmp_path), "import torch\n\ndef build_model(params:\n    pass\n")
    proc = cockpit(command, str(camp), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "task.py:3" in proc.stderr and "does not parse" in proc.stderr
    assert "Traceback" not in proc.stderr and "torch build" not in proc.stderr
    assert no_run_made(camp)


@pytest.mark.slow  # imports the task in a child process, as check and pilot do
def test_a_task_that_raises_on_import_is_named_where_it_raised(tmp_path: Path) -> None:
    camp = with_task(make_campaign(tmp_path), "x = 1\nraise RuntimeError('no GPU here')\n")
    proc = cockpit("check", str(camp), cwd=tmp_path)
    assert proc.returncode == 2
    assert "task.py:2" in proc.stderr and "RuntimeError: no GPU here" in proc.stderr


@pytest.mark.slow  # imports the task in a child process, as check and pilot do
@pytest.mark.parametrize("command", ["check", "pilot"])
def test_an_empty_training_split_is_refused_before_a_run(tmp_path: Path, command: str) -> None:
    camp = make_campaign(tmp_path)
    set_params(camp, train_examples=0)
    proc = cockpit(command, str(camp), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the 'train' split is empty" in proc.stderr
    assert "variants lr1e-4" in proc.stderr or command == "pilot"  # said once for every variant it holds for
    assert no_run_made(camp)


@pytest.mark.slow  # imports the task in a child process, as check and pilot do
@pytest.mark.parametrize("command", ["check", "pilot"])
def test_an_update_larger_than_the_dataset_is_refused(tmp_path: Path, command: str) -> None:
    camp = make_campaign(tmp_path)
    set_params(camp, train_examples=10)
    proc = cockpit(command, str(camp), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "one update takes 16 examples" in proc.stderr and "training split has 10" in proc.stderr
    assert no_run_made(camp)


@pytest.mark.slow  # imports the task in a child process, as check and pilot do
def test_check_still_says_valid_for_a_campaign_that_can_run(tmp_path: Path) -> None:
    proc = cockpit("check", str(make_campaign(tmp_path)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


@pytest.mark.slow
def test_a_run_that_meets_an_empty_split_fails_its_gate_not_cockpit(tmp_path: Path) -> None:
    """Started past the check (the TUI, or --no-task-check): a failed gate naming the split, never exit 6."""
    camp = make_campaign(tmp_path)
    set_params(camp, train_examples=0)
    proc = cockpit("pilot", str(camp), "--no-task-check", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    st = runs.state(next((camp / "runs").iterdir()))
    assert st.status == "failed" and "training split has 0 examples" in (st.stop_reason or "")
    assert (
        "a bug in Cockpit" not in proc.stdout
        and "bug in Cockpit" not in (camp / "runs").joinpath(st.id, "output.log").read_text()
    )


@pytest.mark.slow
def test_a_run_whose_task_does_not_import_gets_the_tasks_remedy(tmp_path: Path) -> None:
    camp = with_task(make_campaign(tmp_path), "def broken(:\n")
    proc = cockpit("pilot", str(camp), "--no-task-check", cwd=tmp_path)
    assert proc.returncode not in (0, 6), proc.stdout[-3000:]
    st = runs.state(next((camp / "runs").iterdir()))
    stack = next(g for g in st.gates if g.get("phase") == "stack")
    assert "task" in stack["remedy"] and "torch build" not in stack["remedy"], stack
