"""The report: every run with its reason, the spread across seeds, decisions, sheet, plan, conclusion, charts."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit import report as rp
from cockpit.cli import main
from tests.fake_runs import make_campaign, series_run, standard_gates, write_run


@pytest.fixture
def campaign(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Pilots (one crashed, one failed, one passed) and a series of 3 variants x 3 seeds, one diverged."""
    camp = make_campaign(tmp_path)
    ids: dict[str, str] = {}
    ids["crashed"], _ = write_run(camp, gates=standard_gates(None, None)[:2], status=None)
    ids["failed"], _ = write_run(
        camp,
        gates=standard_gates(None, None)[:3],
        status="failed",
        reason="gate data failed: 3 examples lose every target token",
    )
    ids["pilot"], _ = write_run(camp, gates=standard_gates(None, None), steps={"update_second": 0.1})
    for seed, v in enumerate((1.90, 1.92, 1.94)):
        series_run(camp, "lr1e-4", seed, v)
    for seed, v in enumerate((2.30, 2.35, 2.33)):
        series_run(camp, "lr5e-5", seed, v)
    for seed, v in enumerate((1.91, 1.93)):
        series_run(camp, "lr2e-4", seed, v)
    ids["diverged"], _ = series_run(
        camp,
        "lr2e-4",
        2,
        None,
        status="diverged",
        reason="diverged: loss 18.2 at update 40 is above 4 x its starting value 4.3",
    )

    def decide(nb: nbm.Notebook) -> None:
        nb.decisions.append(nbm.Decision(date="2026-11-30", text="keep the effective batch at 16", runs=[ids["pilot"]]))
        nb.decisions.append(
            nbm.Decision(
                date="2026-11-29", text="lr2e-4 seed 2 diverged: not rerun", kind="observation", runs=[ids["diverged"]]
            )
        )

    nbm.mutate(camp, decide)
    return camp, ids


def test_report_lists_every_run_with_its_reason(campaign: tuple[Path, dict[str, str]]) -> None:
    camp, ids = campaign
    assert main(["report", str(camp)]) == 0
    text = (camp / "report" / "report.md").read_text("utf-8")
    for head in (
        "## Question",
        "## What was held constant",
        "## Runs",
        "## Spread across seeds",
        "## Decisions",
        "## Selection sheet",
        "## Rental plan",
        "## Conclusion",
        "### Loss curves",
        "### Memory per phase",
    ):
        assert head in text, head
    assert "Which learning rate trains the tiny instruction-following LM best" in text
    assert "held constant across variants: **updates**" in text and "16 examples per update" in text
    nb = nbm.load(camp)
    assert len(nb.runs) == 12
    for row in nb.runs:
        assert f"| {row.id} |" in text
    assert f"**{ids['crashed']}** (pilot, lr1e-4, seed 0) **crashed**" in text
    assert "process ended without a final event" in text
    assert (
        f"**{ids['failed']}** (pilot, lr1e-4, seed 0) **failed**" in text
        and "3 examples lose every target token" in text
    )
    assert f"**{ids['diverged']}** (train, lr2e-4, seed 2) **diverged**" in text
    assert "loss 18.2 at update 40 is above 4 x its starting value 4.3" in text
    assert f"- {ids['diverged']} (lr2e-4 seed 2): diverged: diverged: loss 18.2" in text  # not averaged in


def test_spread_across_seeds_and_the_reference_staying_best(campaign: tuple[Path, dict[str, str]]) -> None:
    camp, _ = campaign
    text = rp.build(camp)
    # lr1e-4: 1.90, 1.92, 1.94 -> mean 1.92, sd 0.02; every seed listed
    assert "| lr1e-4 | as in the notebook | 3 | 1.9200 | 0.0200 | 1.9000 | 1.9400 |" in text
    assert "s0 1.9000" in text and "s1 1.9200" in text and "s2 1.9400" in text
    # the rule of `cockpit compare`: a difference counts only beyond the seeds' spread (largest range)
    row = next(line for line in text.splitlines() if line.startswith("| lr2e-4 | as in the notebook | 2 |"))
    assert "not distinguishable: difference" in row and "within the seeds' spread 0.04" in row
    row = next(line for line in text.splitlines() if line.startswith("| lr5e-5 | as in the notebook | 3 |"))
    assert "worse than the reference by 0.4067, more than the seeds' spread 0.05" in row
    assert "*Generated from the figures in this report, not written by a person" in text
    assert "The reference lr1e-4 stays the best choice" in text
    assert "- 2026-11-29 (observation): lr2e-4 seed 2 diverged: not rerun" in text
    assert text.index("2026-11-29") < text.index("2026-11-30 (decision)")


def test_a_variant_better_by_more_than_the_seeds_is_named(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    write_run(camp, gates=standard_gates(None, None), steps={"update_second": 0.1})
    for seed, (a, b) in enumerate(((1.90, 1.50), (1.92, 1.52), (1.94, 1.51))):
        series_run(camp, "lr1e-4", seed, a)
        series_run(camp, "lr2e-4", seed, b)
    text = rp.build(camp)
    assert (
        "lr2e-4 reached a better mean final val_loss than the reference lr1e-4: 1.5100 vs 1.9200 over 3 and 3 "
        "seeds (better than the reference by 0.41, more than the seeds' spread 0.04)"
    ) in text
    assert "Mean final val_loss at or better than the target 2: lr1e-4, lr2e-4" in text


def test_the_notebook_conclusion_is_used_when_written(campaign: tuple[Path, dict[str, str]]) -> None:
    camp, _ = campaign

    def conclude(nb: nbm.Notebook) -> None:
        nb.conclusion = nbm.Conclusion(
            text="Keep 1e-4: nothing beat it by more than seed noise.", chosen_variant="lr1e-4", date="2026-12-01"
        )

    nbm.mutate(camp, conclude)
    text = rp.build(camp)
    assert "*Written in the notebook ([conclusion], 2026-12-01):*" in text
    assert "Keep 1e-4: nothing beat it by more than seed noise." in text
    assert "Chosen variant: **lr1e-4** (the reference)" in text


def test_charts_are_text(campaign: tuple[Path, dict[str, str]]) -> None:
    camp, _ = campaign
    text = rp.build(camp)
    charts = text[text.index("## Charts") :]
    assert (
        "● lr1e-4 (3 seeds), ▲ lr5e-5 (3 seeds), ■ lr2e-4 (2 seeds)" in charts
    )  # the diverged seed is not averaged in
    assert "┤" in charts and "└" in charts
    assert "◀ peak" in charts and "MiB process RSS (host)" in charts


def test_bar_chart_says_absent_and_line_chart_scales() -> None:
    rows = rp.bar_chart([("forward", 100.0), ("export", None), ("worst_case", 400.0)], "MiB", width=8)
    assert rows[0].startswith("forward    │██ ") and "100 MiB" in rows[0]
    assert rows[1] == "export     │ absent"
    assert rows[2].startswith("worst_case │████████ 400 MiB") and rows[2].endswith("◀ peak")
    chart = rp.line_chart([("a", [(0, 1.0), (10, 0.0)])], height=3, width=11)
    assert chart[0].endswith("┤●          ") and chart[2].endswith("┤          ●")
    # points sharing a column are averaged into one mark
    chart = rp.line_chart([("a", [(0, 1.0), (1, 0.0), (100, 1.5)])], height=3, width=3)
    assert [line[-3:] for line in chart[:3]] == ["  ●", "   ", "●  "]  # column 0 holds the mean 0.5
    assert chart[2].startswith("0.5 ┤")
    assert rp.mean_curve([[(1, 2.0), (2, 4.0)], [(1, 4.0)]]) == [(1, 3.0), (2, 4.0)]


def test_report_without_runs_says_what_is_missing(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    text = rp.build(camp)
    assert "No selection sheet: no passed pilot of variant 'lr1e-4'" in text
    assert "No series run has finished with a final val_loss" in text
    assert "Nothing can be planned" in text
    assert "No completed series run has written a loss curve yet." in text


def test_a_quick_look_with_other_settings_is_kept_apart(campaign: tuple[Path, dict[str, str]]) -> None:
    camp, _ = campaign
    quick, _ = series_run(camp, "lr5e-5", 0, 1.2, updates=20, overrides={"updates": 20})
    text = rp.build(camp)
    seeds = text[text.index("## Spread across seeds") : text.index("## Decisions")]
    rows = [line for line in seeds.splitlines() if line.startswith("| lr5e-5 |")]
    assert len(rows) == 2 and "| as in the notebook | 3 | 2.3267" in rows[0]
    assert "updates" in rows[1] and f"s0 1.2000 ({quick})" in rows[1]
    assert "no completed reference run with the same settings" in rows[1]
    assert "The reference lr1e-4 stays the best choice" in text  # the quick look does not count


def test_without_matplotlib_the_report_says_how_to_get_pictures(
    campaign: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from cockpit.report import charts

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    camp, _ = campaign
    assert main(["report", str(camp)]) == 0
    text = (camp / "report" / "report.md").read_text("utf-8")
    assert text.count(charts.INSTALL_HINT) == 1 and "┤" in text
    assert not (camp / "report" / charts.LOSS_SVG).exists()
