"""Issue 26, item 5: a probe campaign describes the script, not a template: the tests that start processes or load
models (the rest: tests/unit/test_probe_campaign.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cockpit import cli, runs
from cockpit import notebook as nbm
from cockpit.notebook.parse import tomllib
from tests.unit.test_probe_campaign import PLAIN, PY


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
