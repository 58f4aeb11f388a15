"""Issue 14, item 4: every bad notebook gets a clear error, and text never breaks output: the tests that start processes
or load models (the rest: tests/unit/test_hostile_notebook.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cockpit.cli import main as cli
from tests.fake_runs import make_campaign, series_run, write_run
from tests.unit.test_hostile_notebook import MARKUP, _edit


@pytest.mark.slow  # three cockpit check runs, each importing the task in a child process: 11 s
def test_check_tells_a_task_file_or_module_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "campaign.toml").write_text(_edit("cockpit.tasks.tinylm:task", "my_task.py:task"))
    assert cli(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "my_task.py" in err and "does not exist" in err
    (tmp_path / "my_task.py").write_text("task = None\n")
    assert cli(["check", str(tmp_path)]) == 2  # the file exists, but check imports it: no Task in it
    assert "NoneType, not a cockpit.pilot.task.Task" in capsys.readouterr().err
    (tmp_path / "my_task.py").write_text("from cockpit.tasks.tinylm import task\n")
    assert cli(["check", str(tmp_path)]) == 0
    capsys.readouterr()
    (tmp_path / "campaign.toml").write_text(_edit("cockpit.tasks.tinylm:task", "cockpit.tasks.nosuch:task"))
    assert cli(["check", str(tmp_path)]) == 2
    assert "cockpit.tasks.nosuch" in capsys.readouterr().err


@pytest.mark.slow  # runs, compare, report and check (its child imports the task) at two widths: 16 s
def test_markup_in_notebook_text_and_stop_reasons_is_printed_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = make_campaign(tmp_path, variants=[{"id": m, "set": {"lr": 3e-4}, "kind": "quality"} for m in MARKUP])
    for i, m in enumerate(MARKUP):
        series_run(camp, m, 0, 3.5 + i / 10, status="diverged", reason=f"loss [/red] {m} exploded")
        series_run(camp, m, 1, 3.4 + i / 10)
        series_run(camp, m, 2, 3.45 + i / 10)
    write_run(camp, status="error", reason="[/] a task's exception: KeyError('[bold]')")
    for argv in (["runs", str(camp)], ["compare", str(camp)], ["report", str(camp)], ["check", str(camp)]):
        for width in ("80", "200"):
            os.environ["COLUMNS"] = width
            try:
                code = cli(argv)
            finally:
                del os.environ["COLUMNS"]
            out, err = capsys.readouterr()
            assert code == 0 and "Traceback" not in err, (argv, err)
            if argv[0] in ("runs", "compare"):
                for m in MARKUP[:3]:
                    assert m in out, (argv, m)
