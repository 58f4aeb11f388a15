"""A newcomer's first contact with the TUI at 80x24 (issue 24, item 9): gate rows out of view are counted,
dialog hints wrap, the stop reason is a line rather than a sliver of a column, a new run's header names its
variant and seed, help wraps under its descriptions, and a notebook that cannot be read offers no key that
cannot work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cockpit import runs
from cockpit.tui.screens.run import RunScreen
from tests.tui.support import screen_text
from tests.tui.test_screens import SIZE, shows, until

pytestmark = pytest.mark.slow  # renders whole apps: not in the fast loop


def first(text: str, pattern: str) -> str:
    return next((line for line in text.splitlines() if re.search(pattern, line)), "")


async def test_gate_rows_out_of_view_are_counted_in_the_header(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and "worst_case" in screen_text(app))
        # 14 phases, 9 rows in view: the header says 5 more are below
        await until(pilot, shows(app, "phase \u21935 more"), what="the count of rows below")
        await pilot.press("end")
        await until(pilot, shows(app, "phase \u21915"), what="the count of rows above after End")
        assert "export" in screen_text(app)


async def test_a_dialog_hint_wraps_instead_of_being_cut(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))
        await pilot.press("v")
        # the verdict dialog's hint is 77 characters in a 64-column dialog: it was cut after "; E"
        await until(pilot, shows(app, "Escape cancels"), what="the whole hint")


@pytest.mark.parametrize("width", [80, 120])
async def test_the_stop_reason_is_a_line_at_80_columns_and_a_column_when_wide(make_app, width: int):
    app = make_app()
    async with app.run_test(size=(width, 24)) as pilot:
        await until(pilot, shows(app, "r0002"))
        await pilot.press("down")  # r0002 crashed: its stop reason is read under the table
        text = screen_text(app)
        columns = [str(k.value) for k in app.screen.query_one("#runs").columns]
        assert ("reason" in columns) == (width >= 110), columns  # at 80, one character of it was in view
        detail = first(text, r"^ r0002 pilot")
        assert "crashed" in detail and "seed 1" in detail, text


async def test_a_new_run_names_its_variant_and_seed_before_it_starts(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))
        await pilot.press("p")
        await until(pilot, shows(app, "Start a pilot"))
        await pilot.press("down", "enter")  # lr5e-5; the seed field has the focus
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="the new run's screen")
        # the launcher here never writes an event: what the header knows comes from run.toml
        await until(pilot, shows(app, "r0012 lr5e-5 seed 0"), what="variant and seed from run.toml")
        assert "?" not in first(screen_text(app), r"^ r0012")


async def test_help_descriptions_wrap_under_themselves(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))
        await pilot.press("question_mark")
        await until(pilot, shows(app, "Home / End"))
        # "filter: variant:ID status:failed seed:0-2 kind:train or any text" wraps at 80 columns: its second
        # line starts in the description's column, not under the keys
        line = first(screen_text(app), r"kind:train or any text")
        assert re.search(r"\u2588 {15,}kind:train", line), screen_text(app)


async def test_a_notebook_that_cannot_be_read_offers_no_key_that_cannot_work(make_app, tmp_path: Path):
    camp = tmp_path / "broken"
    camp.mkdir()
    (camp / "campaign.toml").write_text('[campaign]\nname = "unterminated\n')
    app = make_app(campaign=camp)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "cannot be read"))
        await pilot.pause(0.2)
        text = screen_text(app)
        footer = text.splitlines()[-1]
        assert "Pilot" not in footer and "Series" not in footer and "Decision" not in footer, footer
        assert "Help" in footer and "Quit" in footer, footer
        assert "First press" not in text and "cannot be read (what is wrong is above)" in text, text
        assert "d adds a decision" not in text, text
        await pilot.press("p")  # pressed anyway: it says why not, and nothing starts
        await until(pilot, lambda: any("Fix the file" in n.message for n in app._notifications))
        assert not runs.run_dirs(camp)


async def test_the_running_phase_is_brought_into_view_when_it_starts(make_app, launcher):
    from cockpit import events as ev

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))
        await pilot.press("p")
        await until(pilot, shows(app, "Start a pilot"))
        await pilot.press("enter", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="the new run's screen")
        writer = ev.EventWriter(launcher.started[0] / ev.EVENTS_FILE)
        writer.emit(ev.RUN_START, run_id="r0012", variant="lr1e-4", seed=0, phases=list(ev.PHASES))
        mem = {"torch": None, "nvml": None, "rss": 2**30, "rss_peak": 2**30}
        for phase in ev.PHASES[:11]:
            writer.emit(ev.PHASE_START, phase=phase, inputs={})
            writer.emit(ev.GATE, phase=phase, verdict="pass", checks=[], duration_s=0.1, mem=mem)
        writer.emit(ev.PHASE_START, phase=ev.PHASES[11], inputs={})
        writer.close()
        await until(pilot, shows(app, "11/14 gates"))
        # the 12th phase runs below the 9 rows in view: its row is scrolled to, and the header counts the rest
        row = ev.PHASES[11]
        await until(pilot, lambda: "running" in first(screen_text(app), rf"^ {row} "), what=f"{row} running, in view")
        assert re.search("phase \u2191\\d", screen_text(app)), screen_text(app)
