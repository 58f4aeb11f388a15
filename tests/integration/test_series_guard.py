"""The series is where the money goes: it starts only behind a passed pilot of the same settings and task: the tests
that start processes or load models (the rest: tests/unit/test_series_guard.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit import compare
from cockpit import notebook as nbm
from cockpit.cli import main as cli
from cockpit.errors import UsageError
from tests.fake_runs import make_campaign, write_run
from tests.unit.test_series_guard import passed_pilot, vet


@pytest.mark.slow  # cockpit check (the task imported), the series guard and compare: 5.4 s
def test_a_protocol_change_after_runs_is_caught_by_check_series_and_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = make_campaign(tmp_path)
    passed_pilot(camp)
    old, _ = write_run(
        camp,
        kind="train",
        seed=0,
        status="completed",
        reason="budget reached",
        metrics={"final_val_loss": 2.5, "updates": 200},
    )

    def edit(nb: nbm.Notebook) -> None:
        nb.stop.divergence_factor = 3.0
        nb.validation.every_updates = 25

    nbm.mutate(camp, edit)
    assert cli(["check", str(camp)]) == 1
    err = capsys.readouterr().err
    assert "stop.divergence_factor 4.0 -> 3.0" in err and "validation_every_updates 50 -> 25" in err and old in err
    with pytest.raises(UsageError, match="the protocol changed after 1 training run"):
        vet(nbm.load(camp), ["lr1e-4"], [1])
    assert cli(["protocol", str(camp), "--why", "divergence came too late to save budget"]) == 0
    nb = nbm.load(camp)
    assert nb.campaign.protocol_revision == 2
    assert nb.decisions[-1].kind == "protocol" and "divergence came too late" in nb.decisions[-1].text
    assert cli(["check", str(camp)]) == 0
    vet(nb, ["lr1e-4"], [1])  # revision 2 starts cleanly
    trs = compare.train_runs(nb)
    assert trs[0].tag.startswith("protocol revision 1 (now 2)")  # kept apart from revision 2's runs
    from cockpit import report

    text = report.build(camp)
    assert f"runs {old} used protocol revision 1: stop.divergence_factor 4.0 -> 3.0" in text
    assert "protocol revision 2 (the rules as the notebook states them now)" in text
