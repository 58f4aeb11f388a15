"""The ``cockpit`` entry point and the new, check and batch commands: the tests that start processes or load models (the
rest: tests/unit/test_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit import notebook
from cockpit.cli import main
from tests.unit.test_cli import _run


@pytest.mark.slow  # two fresh interpreters (new, then check)
def test_a_bare_campaign_name_resolves_from_the_campaigns_folder(tmp_path: Path) -> None:
    assert _run("-m", "cockpit", "new", "x", cwd=tmp_path).returncode == 0
    proc = _run("-m", "cockpit", "check", "x", "--no-task", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "campaigns/x/campaign.toml: valid" in proc.stdout


@pytest.mark.slow  # runs cockpit check, which imports the task in a child process
def test_check_summarises_the_demo(campaign: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(campaign)]) == 0
    out = capsys.readouterr().out
    for expected in (
        "valid",
        "Which learning rate",  # the question
        "held constant  updates",
        "16 = microbatch 2 x accumulation 8 x data replicas 1",
        "updates              200",
        "examples seen        3200",
        "Variants (3)",
        "lr5e-5  lr=5e-05",
        "differs: learning rate halved",
        "divergence: stop when the loss exceeds 4x its start",
        "patience: stop after 3 validations",
        "Validation: every 50 updates (4 validations in 200 updates)",
        "Runs: 0 recorded",
        "predict neither duration nor quality",
    ):
        assert expected in out, f"missing {expected!r} in:\n{out}"


@pytest.mark.slow  # runs cockpit check, which imports the task in a child process
def test_check_accepts_the_file_and_counts_runs(campaign: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nb = notebook.load(campaign)
    nb.runs += [
        notebook.RunRow("r0001", "lr1e-4", status="completed"),
        notebook.RunRow("r0002", "lr2e-4", status="diverged", stop_reason="loss above 4x"),
    ]
    notebook.save(nb)
    assert main(["check", str(campaign / "campaign.toml")]) == 0
    assert "Runs: 2 recorded (1 completed, 1 diverged)" in capsys.readouterr().out


@pytest.mark.slow  # runs cockpit check, which imports the task in a child process
def test_check_says_what_a_batch_variant_moves(campaign: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = campaign / "campaign.toml"
    path.write_text(path.read_text("utf-8").replace("set = { lr = 2e-4 }", "set = { microbatch = 4 }"), "utf-8")
    assert main(["check", str(campaign)]) == 0
    assert "examples seen change 3200 -> 6400" in capsys.readouterr().out
