"""A [task.params] key named like a [training] or [batch] key is refused at load, naming both keys (issue 36, item 1):
the task receives all three in one flat ``params``, so ``examples = 400`` meant as a dataset size became a second
budget (a traceback in check, "a bug in Cockpit" in every series run) and ``epochs = 3`` silently replaced
``updates``. The reserved names are listed in docs/notebook.md, and that list is the rule's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit.cli import main as cli
from cockpit.notebook.check import RESERVED
from tests.conftest import CAMPAIGN_TEXT

DOCS = Path(__file__).resolve().parents[2] / "docs" / "notebook.md"


def with_param(line: str) -> str:
    assert "d_model = 64" in CAMPAIGN_TEXT
    return CAMPAIGN_TEXT.replace("d_model = 64", f"d_model = 64\n{line}", 1)


def refusal(tmp_path: Path, text: str) -> str:
    (tmp_path / "campaign.toml").write_text(text, "utf-8")
    with pytest.raises(nbm.NotebookError) as err:
        nbm.load(tmp_path)
    return str(err.value)


def test_a_budget_named_task_param_is_refused_beside_the_notebooks_budget(tmp_path: Path) -> None:
    msg = refusal(tmp_path, with_param("examples = 400"))
    assert "task.params.examples: = 400 collides with [batch] examples" in msg, msg
    assert "beside [batch] updates = 200 (a second budget)" in msg, msg  # both keys named
    assert "n_examples" in msg


def test_a_task_param_that_would_replace_a_setting_names_its_value(tmp_path: Path) -> None:
    msg = refusal(tmp_path, with_param("microbatch = 4"))
    assert "task.params.microbatch: = 4 collides with [batch] microbatch" in msg, msg
    assert "replace [batch] microbatch = 2" in msg, msg
    msg = refusal(tmp_path, with_param("lr = 0.5"))
    assert "replace [training] lr = 0.0001" in msg, msg


def test_every_command_that_loads_the_notebook_refuses_it_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "campaign.toml").write_text(with_param("epochs = 3"), "utf-8")
    for command in (["check", "--no-task"], ["pilot"], ["series"]):
        assert cli([command[0], str(tmp_path), *command[1:]]) == 2, command
        err = capsys.readouterr().err
        assert "task.params.epochs" in err and "[batch] updates = 200" in err and "Traceback" not in err, err


def test_a_variant_may_still_set_a_training_key(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(CAMPAIGN_TEXT, "utf-8")
    nb = nbm.load(tmp_path)
    assert any("lr" in v.set for v in nb.variants)  # `set` is the way to change a setting for one variant


def test_the_docs_list_exactly_the_reserved_names() -> None:
    text = DOCS.read_text("utf-8")
    para = next(p for p in text.split("\n\n") if p.startswith("**Reserved names.**"))
    listed = set(re.findall(r"`([a-z_]+)`", para.split(":", 1)[1].split(". ")[0]))
    assert listed == set(RESERVED), sorted(listed ^ set(RESERVED))
