"""Hundreds of runs, small terminals, quiet and correct signalling, discoverability (issue 15, items 3-9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit.tui.runtable import RunView, matches
from cockpit.tui.screens.campaign import CampaignScreen
from cockpit.tui.screens.data import DataScreen
from cockpit.tui.screens.dialogs import ConfirmScreen, suggested
from cockpit.tui.screens.editdialogs import VerdictScreen
from cockpit.tui.screens.help import HelpScreen, help_text
from cockpit.tui.screens.run import RunScreen
from cockpit.tui.widgets.table import CursorTable
from tests.tui.support import screen_text

from . import scenarios
from .test_screens import notes, shows, until

pytestmark = pytest.mark.slow  # renders whole apps: not in the fast loop

SIZE = (80, 24)


def test_filter_terms():
    v = RunView("r0042", "lr2e-4", 7, "train", "diverged", "train", 300.0, 40.0, "reject", "diverged: loss 18")
    assert matches(v, "variant:lr2 status:div seed:5-9 kind:train")
    assert matches(v, "bad") and matches(v, "status:bad") and matches(v, "loss 18")
    assert not matches(v, "seed:0-2") and not matches(v, "status:completed") and not matches(v, "verdict:keep")
    assert matches(v, "verdict:rej") and not matches(v, "seed:x")


def test_suggested_verdict_is_what_enter_saves():
    words = ("keep", "reject", "rerun", "inconclusive")
    assert suggested("rej", words) == "reject"
    assert suggested("Inc", words) == "inconclusive"
    assert suggested("looks fine", words) == "looks fine"
    assert suggested("", words) == ""


async def test_hundreds_of_runs_filter_sort_jump_and_detail(make_app, recorded: Path):
    scenarios.add_series(recorded, 189)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, CampaignScreen)
        table = screen.query_one("#runs", CursorTable)
        await until(pilot, lambda: table.row_count == 200 and len(screen.states) == 200, what="200 runs read")
        assert table.fixed_columns == 1  # the id stays when the table scrolls sideways
        await pilot.press("end")
        await until(pilot, lambda: table.cursor_key() == "r0200")
        assert "r0200 train lr1e-4" in screen_text(app)  # the detail line under the table
        await pilot.press("home")
        await until(pilot, lambda: table.cursor_key() == "r0001")
        await pilot.press("f")  # the next failed, diverged or crashed run
        await until(pilot, lambda: table.cursor_key() == "r0002")
        await pilot.press("f")
        await until(pilot, lambda: table.cursor_key() == "r0009")
        await pilot.press("slash", *"status:diverged", "enter")
        await until(pilot, lambda: 0 < table.row_count < 20, what="only diverged runs")
        assert all(screen.views[str(k.value)].status == "diverged" for k in table.rows)
        assert "of 200" in str(table.border_title)
        await pilot.press("escape")  # clears the filter
        await until(pilot, lambda: table.row_count == 200)
        await pilot.press("t", "t", "t", "t")  # run -> variant -> seed -> status -> peak (largest first)
        await until(pilot, lambda: screen.sort_by == "peak")
        assert table.cursor_key() is not None
        first = str(table.coordinate_to_cell_key((0, 0)).row_key.value)
        assert first == "r0001"  # the largest peak: the GPU pilot's 1,180 MiB
        await pilot.press("T")  # reversed: the smallest first
        await until(pilot, lambda: str(table.coordinate_to_cell_key((0, 0)).row_key.value) != "r0001")


async def test_empty_campaign_says_what_to_do_first(make_app, recorded: Path):
    def clear(nb: nbm.Notebook) -> None:
        nb.runs.clear()
        nb.decisions.clear()

    nbm.mutate(recorded, clear)
    for rdir in (recorded / "runs").iterdir():
        for f in rdir.iterdir():
            f.unlink()
        rdir.rmdir()
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "No run yet."), what="the empty-campaign hint")
        assert "p to start a pilot" in screen_text(app).replace("\n", " ") or "press p" in screen_text(app)


async def test_a_run_writing_its_own_row_is_not_announced_a_person_is(make_app, recorded: Path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))

        def run_ends(nb: nbm.Notebook) -> None:  # what a run writes at its end
            row = nb.run("r0002")
            row.status, row.stop_reason, row.ended = "crashed", "killed", "2026-01-01T11:00:00+00:00"

        nbm.mutate(recorded, run_ends)
        await until(pilot, lambda: app.notebook.run("r0002").stop_reason == "killed", what="the reload")
        assert "changed on disk" not in notes(app)
        nbm.mutate(recorded, lambda nb: setattr(nb.run("r0001"), "verdict", "keep"))
        await until(pilot, lambda: "changed on disk" in notes(app), what="a person's change announced")
        assert "run r0001" in notes(app)


async def test_toasts_wait_while_a_dialog_asks(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, VerdictScreen))
        app.notify("something happened meanwhile")
        await pilot.pause(0.2)
        assert "something happened" not in notes(app)
        await pilot.press("escape")
        await until(pilot, lambda: "something happened" in notes(app), what="the toast once the dialog closed")


async def test_verdict_dialog_saves_the_suggestion_and_keeps_text_on_refusal(make_app, recorded: Path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, VerdictScreen))
        await pilot.press(*"rej", "enter")
        await until(pilot, shows(app, "verdict of r0001 saved: reject"))
        assert nbm.load(recorded).run("r0001").verdict == "reject"
        # a linked run that does not exist: the note dialog marks the field and keeps both texts
        await pilot.press("d")
        await until(pilot, shows(app, "New decision"))
        await pilot.press(*"a decision", "tab", *",r9999", "enter")
        await until(pilot, lambda: app.screen.query_one("#runs").has_class("-invalid"), what="the field marked")
        assert app.screen.query_one("#text").value == "a decision"
        assert "r9999" in screen_text(app)


async def test_context_help_palette_order_and_quit_line(make_app):
    assert help_text("Compare").plain.index("Compare") < help_text("Compare").plain.index("Campaign")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert "Run  (this screen)" in screen_text(app)
        await pilot.press("escape", "escape", "ctrl+p")
        await until(pilot, shows(app, "Start a pilot"), what="the palette")
        text = screen_text(app)
        assert text.index("Start a pilot") < text.index("Quit") if "Quit" in text else True
        await pilot.press("escape", "q")
    assert "no run of this campaign is running" in app.quit_summary


async def test_small_terminal_footer_stacking_and_maximise(make_app):
    app = make_app()
    async with app.run_test(size=(60, 20)) as pilot:
        await until(pilot, shows(app, "r0001"))
        footer = screen_text(app).splitlines()[-1]
        assert "Help" in footer and "Quit" in footer  # kept at any width; others left out whole
        assert "Compa" not in footer or "Compare" in footer
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        assert app.screen.has_class("-narrow")  # stacked below 100 columns
        await pilot.press("m")
        await until(pilot, lambda: app.screen.maximized is not None)
        await pilot.press("m")
        await until(pilot, lambda: app.screen.maximized is None)


async def test_stopped_pilot_reads_stopped_with_no_failure_remedy(make_app, recorded: Path):
    rid = scenarios.add_stopped_pilot(recorded)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("end", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run_id == rid)
        await until(pilot, shows(app, "worst_case     stopped"))
        assert "fail" not in screen_text(app).split("worst_case")[1].splitlines()[0]
        app.screen.open_gate("worst_case")
        await until(pilot, shows(app, "not a failure of this phase"))
        assert "remedy" not in screen_text(app)


async def test_data_of_a_series_run_is_its_variants_pilot(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "i")  # r0003, a series run of lr1e-4
        await until(pilot, lambda: isinstance(app.screen, DataScreen))
        await until(pilot, shows(app, "r0001: 4 inspected examples"), what="the variant's pilot named")
        assert "r0003 is a series run" in screen_text(app)
        assert "data gate: warn" in screen_text(app) and "pos" in screen_text(app)


async def test_a_huge_notebook_is_painted_before_it_is_parsed(make_app, recorded: Path):
    with open(recorded / "campaign.toml", "a", encoding="utf-8") as fh:
        for i in range(3000):
            fh.write(f'\n[[decisions]]\ndate = "2026-01-02"\ntext = "note {i}"\nkind = "observation"\nruns = []\n')
    app = make_app(sync_bytes=0)  # everything above 0 bytes is previewed first
    assert app.notebook_partial and len(app.notebook.decisions) == 50 and app.notebook_decisions == 3001
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: not app.notebook_partial, what="the whole file read in the background")
        assert len(app.notebook.decisions) == 3001
        await pilot.press("p")  # an edit-like action works once the file is read
        await until(pilot, shows(app, "Start a pilot"))
        assert not isinstance(app.screen, ConfirmScreen)
