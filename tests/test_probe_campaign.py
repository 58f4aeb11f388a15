"""Issue 26, item 5: a probe campaign describes the script, not a template.

`cockpit probe -- python train.py ARGS` with no campaign makes ``campaigns/train`` (``[campaign] kind = "probe"``):
the command and no task, variants or settings of Cockpit's. Every probe run records the script's own
command-line settings. Report, sheet and plan speak of the probe as a probe; a pilot, a series and an estimate
refuse in one paragraph; the plan asks for the script's length instead of planning a template's 200 updates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from cockpit import cli, runs
from cockpit import notebook as nbm
from cockpit.commands.probe import campaign_for, script_name, script_settings
from cockpit.notebook.parse import tomllib

SCRIPTS = Path(__file__).parent / "probe_scripts"
PLAIN = str(SCRIPTS / "plain_loop.py")
PY = sys.executable


def test_the_script_s_own_settings_are_read_from_its_command_line() -> None:
    argv = [PY, "-u", "train.py", "--lr", "3e-4", "--batch_size=8", "--compile", "--out", "dir", "--neg", "-1"]
    assert script_settings(argv) == {"lr": 3e-4, "batch_size": 8, "compile": True, "out": "dir", "neg": -1}
    # a launcher's and the interpreter's options are not the script's; a config file is not a setting
    launched = ["torchrun", "--nproc_per_node=2", "-m", "pkg.train", "config/x.py", "--max-iters=5000"]
    assert script_settings(launched) == {"max_iters": 5000}
    assert script_name(launched) == "train"
    assert script_name([PY, "Train Me.py"]) == "train-me"
    assert script_name(["./run.sh", "--fast"]) == "run-sh"


def test_a_probe_campaign_holds_the_command_and_no_template(tmp_path: Path) -> None:
    command = [PY, "train.py", "--lr", "3e-4"]
    path = campaign_for(command, tmp_path / "campaigns")
    assert path == tmp_path / "campaigns" / "train" / "campaign.toml"
    data = tomllib.loads(path.read_text())
    assert data["campaign"]["kind"] == "probe"
    assert data["probe"]["command"] == command
    for section in ("task", "batch", "training", "variants", "pilot"):
        assert section not in data, section  # no template settings written
    nb = nbm.load(path)
    assert nb.is_probe and [v.id for v in nb.variants] == [nbm.SCRIPT_VARIANT]
    assert "task" not in nbm.dumps(nb) and "lr-half" not in nbm.dumps(nb)
    # the same command finds its campaign again; another script of the same name gets a campaign of its own
    assert campaign_for(command, tmp_path / "campaigns") == path
    other = campaign_for([PY, "other/train.py"], tmp_path / "campaigns")
    assert other == tmp_path / "campaigns" / "train-2" / "campaign.toml"


def test_a_probe_campaign_refuses_task_sections_and_a_task_campaign_still_needs_them(tmp_path: Path) -> None:
    path = campaign_for([PY, "train.py"], tmp_path)
    text = path.read_text()
    with pytest.raises(nbm.NotebookError, match=r"\[training\] in a probe campaign"):
        nbm.parse(text + "\n[training]\nlr = 0.1\n", path)
    with pytest.raises(nbm.NotebookError, match=r"missing section \[task\]"):
        nbm.parse(text.replace('kind = "probe"', 'kind = "task"'), path)
    with pytest.raises(nbm.NotebookError, match=r"campaign.kind.*use task"):
        nbm.parse(text.replace('kind = "probe"', 'kind = "script"'), path)
    with pytest.raises(nbm.NotebookError, match=r"\[probe\] has no command"):
        nbm.parse(text.replace("[probe]", "[probe.x]"), path)


def _json(capsys: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.slow
def test_probe_without_a_campaign_makes_one_and_every_reader_speaks_of_a_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["probe", "--json", "--", PY, PLAIN, "--steps", "30", "--batch", "8"])
    out = _json(capsys)
    assert (code, out["status"]) == (0, "passed"), out
    folder = tmp_path / "campaigns" / "plain_loop"
    nb = nbm.load(folder)
    assert nb.is_probe and [(r.id, r.variant, r.kind) for r in nb.runs] == [("r0001", "script", "probe")]
    frozen = tomllib.loads((folder / "runs" / "r0001" / "run.toml").read_text())
    assert frozen["params"] == {"steps": 30, "batch": 8}  # the script's, never a template's lr or 200 updates

    assert cli.main(["report", str(folder)]) == 0
    capsys.readouterr()
    report = (folder / "report" / "report.md").read_text()
    assert "## The script" in report and "steps=30, batch=8" in report
    assert "Probe r0001 (script)" in report and "Pilot r0001" not in report
    assert "lr-half" not in report and "200 updates" not in report
    assert "it does not train to a result" in report

    assert cli.main(["sheet", str(folder)]) == 0
    sheet = capsys.readouterr().out
    assert "from probe r0001" in sheet and "a probe watches the script's first steps" in sheet

    assert cli.main(["plan", str(folder), "--seeds", "1"]) == 0
    plan = capsys.readouterr().out
    assert "the script's length is its own" in plan and "--updates N" in plan and "Pilot them" not in plan
    assert cli.main(["plan", str(folder), "--seeds", "1", "--updates", "30"]) == 0
    assert "30 updates x" in capsys.readouterr().out

    assert cli.main(["compare", str(folder)]) == 0
    assert "a probe campaign measures its script's phases" in capsys.readouterr().out.replace("\n", " ")

    for command in (["pilot", str(folder)], ["series", str(folder)], ["estimate", str(folder)]):
        assert cli.main(command) == 2, command
        err = capsys.readouterr().err
        assert "a probe campaign" in err and "has no [task]" in err and "cockpit probe" in err, err

    # the same command again goes to the same campaign, as r0002
    assert cli.main(["probe", "--json", "--", PY, PLAIN, "--steps", "30", "--batch", "8"]) == 0
    assert _json(capsys)["run"] == "r0002"
    assert [r.id for r in nbm.load(folder).runs] == ["r0001", "r0002"]


@pytest.mark.slow
def test_a_probe_in_a_task_campaign_records_the_script_s_settings_not_the_variant_s(
    campaign: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["probe", str(campaign), "--json", "--", PY, PLAIN, "--batch", "4"])
    out = _json(capsys)
    assert code == 0, out
    run = runs.read_run(out["dir"])
    assert run is not None
    assert run.frozen["params"] == {"batch": 4}
    assert run.params == {"batch": 4}
