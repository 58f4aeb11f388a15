"""The paths that keep the TUI cheap with a thousand runs and a live run open.

Each test checks the behaviour a user sees (what is shown, when it is shown) of a
shortcut taken for speed: cells compared without markup and columns widened only
when they must be, the footer laid out only when its keys change, screens under an
opaque screen kept out of its frames (and caught up when shown again), the run
folders listed only when ``runs/`` changes and finished runs verified a slice at a
time, the chart drawn straight into segments, the compare tables laid out once.
"""

from __future__ import annotations

import io
import json
import math
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from rich.console import Console, Group
from rich.text import Text
from textual.app import App
from textual.screen import Screen
from textual.widgets import DataTable

from cockpit import notebook as nbm
from cockpit import runs
from cockpit.compare import TrainRun, _flat
from cockpit.tui import comparetables
from cockpit.tui import comparison as cmp
from cockpit.tui.api import Intervals
from cockpit.tui.runcache import Listing, RunCache
from cockpit.tui.runtable import scan_one
from cockpit.tui.screens.campaign import FIRST_ROWS, CampaignScreen
from cockpit.tui.screens.run import RunScreen
from cockpit.tui.widgets.footer import FittingFooter
from cockpit.tui.widgets.keyed import put_row
from cockpit.tui.widgets.plot import BraillePlot, Line, Mark, _column_max, render_plot
from cockpit.tui.widgets.table import CursorTable
from tests.tui import scenarios
from tests.tui.support import screen_text
from tests.tui.test_screens import until

SIZE = (100, 30)


# ---------------------------------------------------------------- keyed rows


class _Table(App[None]):
    def compose(self):
        yield DataTable(id="t")


async def test_keyed_rows_update_in_place_and_only_auto_columns_grow():
    app = _Table()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(DataTable)
        table.add_column("id", key="id", width=5)
        table.add_column("reason", key="reason")
        shown: dict = {}
        cols = ["id", "reason"]
        put_row(table, shown, "r1", [Text("r1"), Text("a long stop reason here")], cols)
        put_row(table, shown, "r2", [Text("r2"), Text("short")], cols)
        await pilot.pause()
        wide = table.columns["reason"].content_width  # type: ignore[index]
        assert wide >= len("a long stop reason here")
        # A narrower cell: shown as it is now, the column keeps its width (no re-measuring of the column).
        put_row(table, shown, "r1", [Text("r1"), Text("ok")], cols)
        await pilot.pause()
        assert table.get_cell("r1", "reason").plain == "ok"
        assert table.columns["reason"].content_width == wide  # type: ignore[index]
        # A wider one widens it; a change of style alone is redrawn too.
        put_row(table, shown, "r2", [Text("r2"), Text("x" * 40)], cols)
        put_row(table, shown, "r1", [Text("r1"), Text("ok", style="red")], cols)
        await pilot.pause()
        assert table.columns["reason"].content_width >= 40  # type: ignore[index]
        assert str(table.get_cell("r1", "reason").style) == "red"
        # The fixed column is never widened, whatever it holds.
        put_row(table, shown, "r2", [Text("r2-with-a-long-id"), Text("x")], cols)
        await pilot.pause()
        assert table.columns["id"].width == 5  # type: ignore[index]


# ---------------------------------------------------------------- footer


async def test_footer_lays_out_again_only_when_its_keys_change(make_app, monkeypatch):
    composed = []
    original = FittingFooter.compose

    def counting(self):
        composed.append(type(self.screen).__name__)
        return original(self)

    monkeypatch.setattr(FittingFooter, "compose", counting)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "Compare" in screen_text(app), what="the footer")
        before = len(composed)
        for _ in range(4):  # focus moves and bindings refresh: the same keys
            app.screen.refresh_bindings()
            await pilot.pause()
        assert len(composed) == before, "the footer was laid out again with the same keys"
        await pilot.resize_terminal(60, 30)  # fewer keys fit: laid out again, and still fits
        await until(pilot, lambda: len(composed) > before, what="a new layout after the resize")
        last = screen_text(app).splitlines()[-1]
        assert len(last.rstrip()) <= 60


# ---------------------------------------------------------------- hidden screens


async def test_a_screen_under_an_opaque_screen_is_hidden_and_caught_up_when_shown(make_app, recorded: Path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "r0011" in screen_text(app), what="the runs table")
        campaign = app.screen
        assert isinstance(campaign, CampaignScreen)
        app.push_screen(RunScreen("r0001"))
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and "r0001" in screen_text(app))
        # Nothing shows through an opaque screen: the campaign screen is not repainted under it.
        assert app._background_screens == []
        assert not campaign.is_current
        # Meanwhile a new run appears in the campaign (as when the CLI starts one).
        rid, rdir = runs.create_run(recorded, "lr1e-4", 7)
        (rdir / "events.jsonl").write_text(
            json.dumps({"v": 1, "t": 1.0, "kind": "run_start", "run_id": rid, "variant": "lr1e-4", "seed": 7})
            + "\n"
            + json.dumps({"v": 1, "t": 2.0, "kind": "run_end", "status": "passed", "phase": "export"})
            + "\n"
        )
        await until(pilot, lambda: rid in campaign.states, what="the hidden screen reading the new run")
        await pilot.resize_terminal(80, 24)  # and the terminal shrinks while it is hidden
        await pilot.pause()
        await pilot.press("escape")
        await until(pilot, lambda: "runs (12)" in screen_text(app), what=f"{rid} counted once shown again")
        lines = screen_text(app).splitlines()
        assert len(lines) == 24 and all(len(line) <= 80 for line in lines), "laid out for the new size"
        # Under a dialog the campaign screen stays visible, as Textual has it.
        app.action_help()
        await until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        if app.screen.styles.background.a < 1:
            assert campaign in app._background_screens


@pytest.mark.slow  # waits on the app's real timers: 4-5 s
async def test_a_hidden_campaign_screen_leaves_its_rescans_until_shown_and_reads_fewer_events(make_app, monkeypatch):
    # Under a run's screen the campaign screen neither reads the run folders every runs_s nor redraws
    # its live rows; shown again, it reads them at once. The app reads the running runs' events every
    # events_s only while a run's own screen is in view, every overview_s otherwise.
    app = make_app(
        timing=Intervals(events_s=0.05, quiet_s=0.05, overview_s=0.5, runs_s=0.3, notebook_s=0.2, device_s=0.5)
    )
    scans, polls = [], []
    original_scan = CampaignScreen.load_states

    def counting_scan(self):
        scans.append(time.monotonic())
        return original_scan(self)

    monkeypatch.setattr(CampaignScreen, "load_states", counting_scan)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "r0011" in screen_text(app), what="the runs table")
        original_poll = app.feeds.poll

        def counting_poll(*args, **kwargs):
            polls.append(time.monotonic())
            return original_poll(*args, **kwargs)

        monkeypatch.setattr(app.feeds, "poll", counting_poll)
        await until(pilot, lambda: len(scans) >= 3, what="rescans every runs_s while shown")
        polls.clear()
        await pilot.pause(1.2)
        assert 1 <= len(polls) <= 4, f"{len(polls)} readings of the events in 1.2 s on the overview"
        campaign = app.screen
        app.push_screen(RunScreen("r0001"))
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and "r0001" in screen_text(app))
        await pilot.pause(0.5)  # a scan under way when the screen was pushed ends
        scans.clear()
        polls.clear()
        await pilot.pause(1.2)
        assert scans == [], f"{len(scans)} rescans while hidden"
        assert app.hidden(campaign)
        assert len(polls) >= 8, f"only {len(polls)} readings of the events in 1.2 s on a run's own screen"
        await pilot.press("escape")
        await until(pilot, lambda: len(scans) >= 1, what="a rescan as soon as the campaign screen is shown")
        assert not app.hidden(campaign)


@pytest.mark.slow  # waits on the app's real timers: 4-5 s
async def test_a_run_screen_reads_every_tick_while_events_pour_in_and_less_often_while_they_trickle(make_app):
    app = make_app(
        timing=Intervals(events_s=0.05, quiet_s=0.3, overview_s=0.5, runs_s=0.5, notebook_s=0.2, device_s=0.5)
    )
    polls: list[float] = []
    pouring = [False]
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "r0011" in screen_text(app), what="the runs table")
        original_poll = app.feeds.poll

        def counting_poll(*args, **kwargs):
            polls.append(time.monotonic())
            changed = original_poll(*args, **kwargs)
            if pouring[0]:
                app.feeds.last_lines = 10_000  # as a pilot logging 10,000 events a second reads
            return changed

        app.feeds.poll = counting_poll  # type: ignore[method-assign]
        app.open_run("r0001")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and "r0001" in screen_text(app))
        await pilot.pause(0.4)
        polls.clear()
        await pilot.pause(2.0)
        assert 3 <= len(polls) <= 9, f"{len(polls)} readings in 2 s of a quiet run (one each 0.3 s)"
        pouring[0] = True
        await pilot.pause(0.4)
        polls.clear()
        await pilot.pause(2.0)
        assert len(polls) >= 16, f"only {len(polls)} readings in 2 s while events pour in (one each 0.05 s)"


async def test_a_long_runs_table_shows_a_screenful_in_its_first_frame_then_every_run_in_order(
    make_app, recorded: Path, monkeypatch
):
    # The first frame waits for every row added; past FIRST_ROWS the rest come just after it, at the
    # end of the table. A run added later is added too, not a reason to build the table again.
    scenarios.add_series(recorded, 189)  # 200 runs, a notebook read whole before the first frame
    first: list[int] = []
    original_refresh = Screen._compositor_refresh

    def noting(self):
        original_refresh(self)
        if isinstance(self, CampaignScreen) and not first:
            first.append(self.query_one("#runs", CursorTable).row_count)

    monkeypatch.setattr(Screen, "_compositor_refresh", noting)
    clears = []
    original_clear = CursorTable.clear

    def counting_clear(self, *args, **kwargs):
        clears.append(1)
        return original_clear(self, *args, **kwargs)

    monkeypatch.setattr(CursorTable, "clear", counting_clear)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: bool(first), what="the first frame")
        assert first[0] == FIRST_ROWS, f"the first frame had {first[0]} rows"
        table = app.screen.query_one("#runs", CursorTable)
        await until(pilot, lambda: table.row_count == 200, what="every run in the table")
        ids = [row.key.value for row in table.ordered_rows]
        assert ids == sorted(ids, key=runs.order_key), "the rows after the first screenful are out of order"
        assert "runs (200)" in screen_text(app)
        clears.clear()
        rid, _ = runs.create_run(recorded, "lr1e-4", 99)
        await until(pilot, lambda: table.row_count == 201, what=f"{rid} added")
        assert [row.key.value for row in table.ordered_rows][-1] == rid
        assert clears == [], "the table was built again for a run added at its end"


# ---------------------------------------------------------------- listing and verification


def _finished_run(campaign: Path, seed: int) -> tuple[str, Path]:
    rid, rdir = runs.create_run(campaign, "lr1e-4", seed)
    _end(rdir, rid, seed, "passed")
    return rid, rdir


def _end(rdir: Path, rid: str, seed: int, status: str) -> None:
    """The run's events: started, then ended with ``status`` (written anew; a longer file each time)."""
    events = [
        {"v": 1, "t": 1.0, "kind": "run_start", "run_id": rid, "variant": "lr1e-4", "seed": seed},
        {"v": 1, "t": 2.0, "kind": "log", "level": "info", "message": "x" * (10 if status == "passed" else 40)},
        {"v": 1, "t": 3.0, "kind": "run_end", "status": status, "phase": "export"},
    ]
    (rdir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_listing_follows_added_removed_and_half_made_folders(recorded: Path):
    listing = Listing(recorded)
    first = [p.name for p in listing.dirs()]
    assert first == [p.name for p in runs.run_dirs(recorded)]
    rid, rdir = _finished_run(recorded, 3)
    assert rid in [p.name for p in listing.dirs()]
    # A folder made before its run.toml: left out, then found once run.toml is there,
    # though runs/ itself did not change again.
    half = runs.runs_dir(recorded) / "r0999"
    half.mkdir()
    assert "r0999" not in [p.name for p in listing.dirs()]
    (half / runs.RUN_FILE).write_text((rdir / runs.RUN_FILE).read_text())
    assert "r0999" in [p.name for p in listing.dirs()]
    shutil.rmtree(rdir)
    assert rid not in [p.name for p in listing.dirs()]
    # A symlinked folder is never a run folder (as runs.run_dirs has it).
    (runs.runs_dir(recorded) / "r0998").symlink_to(half, target_is_directory=True)
    assert "r0998" not in [p.name for p in listing.dirs()]
    assert [p.name for p in listing.dirs()] == [p.name for p in runs.run_dirs(recorded)]


def test_a_finished_run_that_changes_is_read_again_by_a_later_verifying_scan(recorded: Path):
    cache = RunCache()
    rid, rdir = _finished_run(recorded, 5)
    states: dict = {}
    scan_one(cache, rdir, set(), states, [], {})
    assert states[rid].status == "passed"
    # Its files change (run again in place): an unverified scan keeps what it had, a verifying one reads it.
    _end(rdir, rid, 5, "failed")
    states = {}
    scan_one(cache, rdir, set(), states, [], {}, verify=False)
    assert states[rid].status == "passed"
    states = {}
    scan_one(cache, rdir, set(), states, [], {}, verify=True)
    assert states[rid].status == "failed"


async def test_the_campaign_scan_verifies_every_finished_run_within_a_few_scans(make_app, recorded: Path, monkeypatch):
    from cockpit.tui.screens import campaign as cs

    monkeypatch.setattr(cs, "VERIFY_PER_SCAN", 3)  # 12 runs: three verified a scan
    rid, rdir = _finished_run(recorded, 9)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen.states.get(rid) is not None, what=f"{rid} read")
        assert screen.states[rid].status == "passed"
        _end(rdir, rid, 9, "failed")
        await until(
            pilot,
            lambda: screen.states[rid].status == "failed",
            timeout=20.0,
            what="the changed finished run read again",
        )


# ---------------------------------------------------------------- chart


def _column_max_point_by_point(ts, ys, t0: float, span: float, dots_x: int) -> list[float | None]:
    """The loop the chart had: each point into its column, keeping the largest."""
    out: list[float | None] = [None] * dots_x
    last_x = dots_x - 1
    for t, y in zip(ts, ys, strict=True):
        x = int((t - t0) / span * last_x)
        if x < 0 or x > last_x:
            x = 0 if x < 0 else last_x
        if out[x] is None or y > out[x]:  # type: ignore[operator]
            out[x] = y
    return out


def test_chart_buckets_as_the_point_by_point_loop_did():
    rng = random.Random(7)
    cases = []
    for n in (1, 2, 5, 300, 2048):
        t = sorted(rng.uniform(0, 100) for _ in range(n))
        cases.append((t, [rng.uniform(-5, 5) for _ in range(n)]))
    cases.append(([1.0] * 50, [0.0] * 49 + [9.0]))  # one time: every point in one column, the peak kept
    cases.append(([float(i // 10) for i in range(100)], [float(i % 13) for i in range(100)]))  # repeated times
    for ts, ys in cases:
        t0, t1 = ts[0], ts[-1]
        span = t1 - t0 if t1 > t0 else 1.0
        for dots_x in (2, 7, 96, 236):
            assert _column_max(ts, ys, t0, span, dots_x) == _column_max_point_by_point(ts, ys, t0, span, dots_x)
    flat = render_plot([Line("x", "red", [1.0] * 50, [0.0] * 49 + [9.0])], [], 30, 6).plain
    assert "9" in flat.splitlines()[1]


class _Plot(App[None]):
    CSS = "BraillePlot { width: 50; height: 12; }"

    def compose(self):
        yield BraillePlot("memory", id="p")


async def test_chart_rows_drawn_as_segments_read_as_its_text():
    app = _Plot()
    async with app.run_test(size=(60, 14)) as pilot:
        plot = app.query_one(BraillePlot)
        t = [i * 0.5 for i in range(400)]
        lines = [
            Line("gpu0", "green", t, [1e9 + 1e8 * math.sin(i / 20) for i in range(400)]),
            Line("reserved", "yellow", t, [5e8 + 1e7 * (i % 7) for i in range(400)]),
        ]
        plot.set_data(lines, [Mark(50.0, "forward"), Mark(120.0, "backward")])
        await pilot.pause()
        want = plot.render().plain.split("\n")
        got = [plot.render_line(y).text for y in range(12)]
        assert [g.rstrip() for g in got] == [w[:50].rstrip() for w in want][:12]
        assert all(plot.render_line(y).cell_length == 50 for y in range(12))
        # New data is drawn anew; the same data at the same size is not recomputed.
        first = plot.render_line(3)
        assert plot.render_line(3) is first
        plot.set_data(lines[:1])
        await pilot.pause()
        assert "reserved" not in plot.render_line(0).text


# ---------------------------------------------------------------- compare tables


def test_compare_tables_laid_out_once_read_as_rich_draws_them(recorded: Path):
    data = cmp.collect(nbm.load(recorded))
    for width in (78, 118):
        items = comparetables.tables(data, width)
        laid = comparetables.laid_out(items, width)
        console = Console(width=width, file=io.StringIO(), color_system=None)
        console.print(Group(*comparetables.tables(data, width)))
        want = [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]
        assert [line.rstrip() for line in laid.plain.split("\n")] == want
        assert any(span.style for span in laid.spans), "the styles are kept"


def test_train_rows_are_asdict_without_the_copies():
    r = TrainRun("r0001", "lr1e-4", 0, "completed", "budget", "", 3.8, 200, 200, 0.5, "", "/x", "")
    assert _flat(r) == asdict(r)
    assert list(_flat(r)) == list(asdict(r))


async def test_compare_opens_on_the_comparison_read_ahead_then_reads_it_again(make_app, monkeypatch):
    import threading

    from cockpit.tui import comparison

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.cache.compared is not None, what="the comparison read ahead")
        ahead = app.cache.compared
        assert ahead.width == 116  # laid out for the scroll compare will have (no re-layout on the UI thread)
        release = threading.Event()
        real = comparison.read

        def slow(*a, **kw):
            release.wait(10)
            return real(*a, **kw)

        monkeypatch.setattr(comparison, "read", slow)
        await pilot.press("C")
        # shown from what was read ahead, while the fresh reading waits
        await until(pilot, lambda: "across seeds" in screen_text(app), what="the tables read ahead")
        release.set()
        await until(pilot, lambda: app.cache.compared is not ahead, what="the comparison read again")
        await pilot.resize_terminal(80, 30)  # Textual delivers a resize after a short debounce
        await until(pilot, lambda: app.screen._width == 76, timeout=20.0, what="the tables laid out for 80 columns")
        lines = str(app.screen.query_one("#compare-tables").visual).splitlines()
        assert len(lines) > 10 and "across seeds" in "\n".join(lines)
        assert max(len(line) for line in lines) <= 76


def test_charts_redraw_once_a_second_or_once_a_dot_column_of_time():
    from cockpit.tui.ingest import RunFeed
    from cockpit.tui.screens.run import CHART_EVERY_S, CHART_MOST_S, chart_every

    feed = RunFeed(Path("/nonexistent/events.jsonl"))
    assert chart_every(feed) == CHART_EVERY_S  # nothing read yet
    feed.first_t, feed.last_t = 1000.0, 1060.0  # a minute: a column every 0.6 s, redrawn every second
    assert chart_every(feed) == CHART_EVERY_S
    feed.last_t = 1000.0 + 300  # five minutes: a column every 3 s
    assert chart_every(feed) == 3.0
    feed.last_t = 1000.0 + 3600  # an hour: capped
    assert chart_every(feed) == CHART_MOST_S
