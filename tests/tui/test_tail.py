"""The run screens' log (``widgets.tail.TailLog``): new lines without a screen layout, and what a reader sees.

Textual's ``Log`` lays the whole screen out for each line it is given until it
holds ``max_lines``; the run screen appends a line a second while a pilot runs.
These tests hold TailLog to what the user sees of a log (the newest line in view
while following, the same text in view while reading older lines, even as old
lines go; long lines scroll across; selection copies the text) and to the point
of it: no layout per line, measured against Textual's own Log.
"""

from __future__ import annotations

from textual.app import App
from textual.geometry import Offset
from textual.screen import Screen
from textual.selection import Selection
from textual.widgets import Log

from cockpit.tui.widgets.tail import TailLog
from tests.tui.support import screen_text


class _Logs(App[None]):
    def __init__(self, widget) -> None:
        super().__init__()
        self.widget = widget

    def compose(self):
        yield self.widget


def _rows(app: App) -> list[str]:
    return [line.strip() for line in screen_text(app).splitlines()]


async def test_new_lines_lay_nothing_out_where_textuals_log_lays_out_the_screen_each_time(monkeypatch):
    layouts: list[str] = []
    original = Screen._refresh_layout

    def counting(self, *args, **kwargs):
        layouts.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counting)

    async def layouts_for(widget, write) -> int:
        app = _Logs(widget)
        async with app.run_test(size=(60, 12)) as pilot:
            write(widget, ["first"])
            await pilot.pause()
            before = len(layouts)
            for i in range(20):  # a line at a time, as a running pilot logs them
                write(widget, [f"line {i}"])
                await pilot.pause()
            return len(layouts) - before

    theirs = await layouts_for(Log(max_lines=500), lambda w, lines: w.write_lines(lines))
    ours = await layouts_for(TailLog(max_lines=500), lambda w, lines: w.write_lines(lines))
    assert theirs >= 20, f"the control: Textual's Log laid out {theirs} times for 20 lines"
    assert ours == 0, f"TailLog laid the screen out {ours} times for 20 lines"


async def test_following_the_end_shows_the_newest_line_and_the_scrollbar_knows_the_length():
    log = TailLog(max_lines=500)
    app = _Logs(log)
    async with app.run_test(size=(60, 12)) as pilot:
        log.write_lines([f"line {i}" for i in range(30)])  # before the first layout: followed all the same
        await pilot.pause()
        rows = _rows(app)
        assert "line 29" in rows[-2] or "line 29" in rows[-1], rows
        assert "line 0" not in rows
        assert log.vertical_scrollbar.window_virtual_size == 30
        for i in range(30, 40):
            log.write_lines([f"line {i}"])
            await pilot.pause()
        assert any("line 39" in r for r in _rows(app))
        assert log.at_end
        assert log.vertical_scrollbar.window_virtual_size == 40


async def test_a_reader_scrolled_up_keeps_the_same_text_in_view_as_lines_come_and_old_ones_go():
    log = TailLog(max_lines=50)
    app = _Logs(log)
    async with app.run_test(size=(60, 12)) as pilot:
        log.write_lines([f"line {i}" for i in range(50)])
        await pilot.pause()
        log.scroll_to(y=20, animate=False, immediate=True)
        await pilot.pause()
        top = _rows(app)[0]
        assert top == "line 20", top
        log.write_lines(["line 50", "line 51"])  # below the window: nothing in view moves
        await pilot.pause()
        assert _rows(app)[0] == "line 20"
        log.write_lines([f"line {i}" for i in range(52, 62)])  # twelve old lines dropped past max_lines
        await pilot.pause()
        assert log.lines[0] == "line 12" and len(log.lines) == 50
        assert _rows(app)[0] == "line 20", "the text under the reader moved when old lines were dropped"
        assert not log.at_end
        log.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        log.write_lines(["line 62"])
        await pilot.pause()
        assert any("line 62" in r for r in _rows(app)), "at the end again: the new line is shown"


async def test_a_long_line_scrolls_across_and_selection_copies_the_text():
    log = TailLog(max_lines=500)
    app = _Logs(log)
    long = "start " + "x" * 100 + " end"
    async with app.run_test(size=(40, 8)) as pilot:
        log.write_lines(["short", long])
        await pilot.pause()
        assert log.virtual_size.width == len(long)
        assert not any("end" in r for r in _rows(app))
        log.scroll_to(x=len(long), animate=False, immediate=True)
        await pilot.pause()
        assert any(r.endswith("end") for r in _rows(app))
        got = log.get_selection(Selection.from_offsets(Offset(0, 0), Offset(5, 1)))
        assert got is not None and got[0] == "short\nstart" and got[1] == "\n"
