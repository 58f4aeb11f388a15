"""Issue 26, item 5: a probe campaign describes the script, not a template.

`cockpit probe -- python train.py ARGS` with no campaign makes ``campaigns/train`` (``[campaign] kind = "probe"``):
the command and no task, variants or settings of Cockpit's. Every probe run records the script's own
command-line settings. Report, sheet and plan speak of the probe as a probe; a pilot, a series and an estimate
refuse in one paragraph; the plan asks for the script's length instead of planning a template's 200 updates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit.commands.probe import campaign_for, script_name, script_settings
from cockpit.notebook.parse import tomllib

SCRIPTS = Path(__file__).parents[1] / "probe_scripts"
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
