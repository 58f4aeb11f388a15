"""The campaign at a glance: question, what is held constant, batch arithmetic, runs (status in colour and in
words), variants, decisions, selection and conclusion. Runs come first from the notebook (instant), then from
their folders: an ended run is read once, in a worker, through the app's cache of run folders (``runcache``);
a running run is followed by its one incremental reader (``feeds``), shared with the run screen.

Built for hundreds of runs: the run id column stays put when the table scrolls sideways; ``/`` filters
(``variant:lr1e-4 status:failed seed:0-2`` or any text), ``t`` sorts by the next column (``T`` reverses),
``n`` and ``f`` jump to the next running and failed run; the line under the table gives the selected run's
stop reason and progress; while a series runs, its bottom border says how far it is. ``e`` edits a variant.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Header, Input

from ... import notebook as nbm
from ... import runs
from .. import progress as pg
from .. import style as sty
from ..api import app_of
from ..feeds import ALL
from ..messages import FeedsChanged, NotebookChanged, RunStates
from ..runcache import Listing
from ..runtable import RUN_COLUMNS, SORTS, RunView, columns_for, detail_text, matches, scan_one, sort_key, view_of
from ..widgets.footer import FittingFooter
from ..widgets.keyed import put_row
from ..widgets.table import CursorTable
from ..widgets.text import TextBox
from .notebookview import decisions, empty_hint, sheet, summary, variants

SCAN_BATCH_S = 0.5  # a scan of the run folders hands over what it read this often
LIVE_S = 1.0  # a running run's row and the detail line are redrawn at most this often
AHEAD_S = 30.0  # the comparison is read ahead at most this often, and only after the runs changed
VERIFY_PER_SCAN = 100  # finished runs whose files a scan looks at again (all of them in a smaller campaign)
FIRST_ROWS = 150  # rows in the first frame (more than any terminal shows): the others come right after it


class CampaignScreen(Screen[None]):
    HELP_SECTION = "Campaign"
    AUTO_FOCUS = "#runs"
    BINDINGS = [
        Binding("enter", "open", "Open run", id="open", show=False),
        Binding("p", "app.start_pilot", "Pilot", id="pilot"),
        Binding("S", "app.start_series", "Series", id="series"),
        Binding("C", "app.compare", "Compare", id="compare"),
        Binding("slash", "filter", "Filter", id="filter", key_display="/"),
        Binding("t", "sort", "Sort", id="sort"),
        Binding("T", "sort(True)", "Reverse", id="reverse", show=False),
        Binding("n", "next('running')", "Next running", id="next-running", show=False),
        Binding("f", "next('bad')", "Next failed", id="next-failed", show=False),
        Binding("d", "note('decision')", "Decision", id="decision"),
        Binding("e", "variant", "Variant", id="variant"),
        Binding("o", "note('observation')", "Observe", id="observation", show=False),
        Binding("v", "verdict", "Verdict", id="verdict", show=False),
        Binding("i", "data", "Data", id="data"),
        Binding("c", "app.conclusion", "Conclusion", id="conclusion", show=False),
        Binding("s", "app.selection", "Sheet", id="selection", show=False),
        Binding("g", "app.device", "GPUs", id="gpus"),
        Binding("r", "reload", "Reload", id="reload", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, runs.RunState] = {}  # from run folders (finished) and readers (running)
        self.live: set[str] = set()  # runs whose process lives: followed by their reader
        self.views: dict[str, RunView] = {}
        self.meta: dict[str, tuple[str, int, str]] = {}  # from run.toml, for runs without a notebook row
        self.query_text = ""
        self.sort_by = "run"
        self.sort_reverse = False
        self._order: list[str] = []  # the row keys in the table, in order
        self._shown: dict[str, tuple[Hashable, ...]] = {}
        self._live_dirty: set[str] = set()
        self._scanning = False  # a reading of the run folders is under way
        self._scan_again = False  # ... and another was asked for meanwhile
        self._next_scan: Timer | None = None
        self._scan_when_shown = False  # a rescan fell due while hidden under a run's screen
        self._listing: Listing | None = None  # the run folders, listed again when runs/ changes
        self._verify_from = 0
        self._ahead_at = float("-inf")

    def compose(self) -> ComposeResult:
        yield Header()
        yield TextBox(id="summary")
        # disabled until / shows it: a hidden field must never take the focus (its keys would hide the screen's)
        yield Input(
            placeholder="filter: variant:ID status:failed seed:0-2 or any text; Enter keeps, Escape clears",
            id="filter",
            compact=True,
            disabled=True,
        )
        yield TextBox(id="empty")
        yield CursorTable(id="runs", fixed_columns=1)
        yield TextBox(id="run-detail")
        with VerticalScroll(id="notes"):
            yield TextBox(id="variants")
            yield TextBox(id="decisions")
            yield TextBox(id="sheet")
        yield FittingFooter(compact=True)

    def on_mount(self) -> None:
        table = self.query_one("#runs", CursorTable)
        self.add_columns(table)
        self.show_notebook()
        # Read the run folders once the first frame is out: a thousand folders read in a thread
        # would otherwise share the interpreter with the first paint.
        self.call_after_refresh(self.load_states)
        self.set_interval(LIVE_S, self.refresh_live)
        table.focus()

    def shown_columns(self) -> list[str]:
        return columns_for(self.app.size.width)

    def add_columns(self, table: CursorTable) -> None:
        for key, label, width in RUN_COLUMNS:
            if key in self.shown_columns():
                table.add_column(label, key=key, width=width)

    def on_resize(self) -> None:
        table = self.query_one("#runs", CursorTable)
        if [str(k.value) for k in table.columns] != self.shown_columns():
            table.clear(columns=True)  # the rows come back from show_runs, the cursor's run with them
            self.add_columns(table)
            self._shown, self._order = {}, []
            self.show_runs()

    # ---- data

    @property
    def nb(self) -> nbm.Notebook:
        return app_of(self).notebook

    def load_states(self) -> None:
        """Read the run folders again, unless a reading is under way (then once more when it ends).

        The reading re-arms itself (dolphie's way): the next starts ``runs_s`` after the last ended,
        so a slow disk or a thousand folders never stack readings on top of each other.
        """
        if self._scanning:
            self._scan_again = True
            return
        self._scanning, self._scan_again = True, False
        self._scan()

    @work(thread=True, group="run-states", exit_on_error=False, description="read run folders")
    def _scan(self) -> None:
        """Every run folder: a finished run from the cache (read once), a running one left to its reader.

        What is read is handed over every half second (a thousand cold folders fill the table as they
        are read), and the last message is always sent, whatever happens on the way.
        """
        app = app_of(self)
        followed = set(self.live)
        states: dict[str, runs.RunState] = {}
        live: list[str] = []
        meta: dict[str, tuple[str, int, str]] = {}
        handed = time.monotonic()
        try:
            if self._listing is None:
                self._listing = Listing(app.campaign_dir)
            dirs = self._listing.dirs()
            n = len(dirs)
            start, self._verify_from = self._verify_from, self._verify_from + VERIFY_PER_SCAN
            for i, p in enumerate(dirs):
                # Finished runs are checked for changes (a resumed run) a slice per scan: a thousand
                # finished runs cost a few hundred stat calls a scan, not six thousand.
                verify = n <= VERIFY_PER_SCAN or (i - start) % n < VERIFY_PER_SCAN
                try:
                    scan_one(app.cache, p, followed, states, live, meta, verify=verify)
                except (OSError, ValueError, TypeError, RecursionError):
                    continue  # a folder being written or deleted: read again at the next scan
                if time.monotonic() - handed > SCAN_BATCH_S:
                    self.post_message(RunStates(states, [], meta, final=False))
                    states, meta, handed = {}, {}, time.monotonic()
        finally:
            self.post_message(RunStates(states, live, meta))

    @on(RunStates)
    def run_states(self, message: RunStates) -> None:
        if not message.final:  # a batch of a scan under way: more rows with their state
            self.states.update(message.states)
            self.meta.update(message.meta)
            self.show_runs()
            return
        self._scanning = False
        if self._scan_again:
            self.load_states()
        elif self._next_scan is None:
            self._next_scan = self.set_timer(app_of(self).timing.runs_s, self._rescan)
        feeds = app_of(self).feeds
        # A finished run read from the cache is the very same object as before: nothing to redraw.
        changed = any(self.states.get(rid) is not st for rid, st in message.states.items())
        changed = changed or any(self.meta.get(rid) != m for rid, m in message.meta.items())
        changed = changed or set(message.live) != self.live
        self.states.update(message.states)
        self.meta.update(message.meta)
        self.live = set(message.live)
        for rid in message.live:
            feed = feeds.want(rid)
            if feed is not None:
                self.states[rid] = feed.state()
                changed = True
        if changed:
            self.show_runs()
        if changed or self._ahead_at == float("-inf"):
            self.read_ahead()

    def read_ahead(self) -> None:
        """Read the comparison ahead, in a worker, after the runs changed (at most every ``AHEAD_S``).

        Compare then opens on it at once and reads it again meanwhile: with a thousand runs, reading
        them all takes longer than opening the screen should. Nothing is read while nothing changes.
        """
        app = app_of(self)
        now = time.monotonic()
        if not app.editable or now - self._ahead_at < AHEAD_S:
            return
        self._ahead_at = now
        from .. import comparison as cmp  # here: the comparison's modules are not needed for the first frame
        from .compare import live_snapshots, table_width

        nb, cache, snapshots = app.notebook, app.cache, live_snapshots(app.feeds)
        width = table_width(0, self.app.size.width)

        def work() -> None:
            try:
                cache.compared = cmp.read(nb, cache, snapshots, width)
            except Exception:  # noqa: BLE001, S110 - only ahead: compare reads (and shows the error) itself
                pass

        self.run_worker(work, thread=True, exclusive=True, group="read-ahead", exit_on_error=False)

    def _rescan(self) -> None:
        self._next_scan = None
        if app_of(self).hidden(self):  # under a run's screen: read again when shown (on_screen_resume)
            self._scan_when_shown = True
            return
        self.load_states()

    def on_screen_resume(self) -> None:
        if self._scan_when_shown:
            self._scan_when_shown = False
            self.load_states()
        self.refresh_live()

    @on(FeedsChanged)
    def feeds_changed(self, message: FeedsChanged) -> None:
        for rid, aspects in message.changed.items():
            if rid in self.live and aspects & {ALL, "status", "gates", "steps"}:
                self._live_dirty.add(rid)
        if any(ALL in a for a in message.changed.values()):
            self.refresh_live()

    def refresh_live(self) -> None:
        """The running runs' rows from their readers (at most once a second), and the detail line.

        Only their rows are redrawn; the table is rebuilt only when a run ended (its status may
        move it in a sorted or filtered table).
        """
        app = app_of(self)
        if app.hidden(self):
            return  # the rows marked dirty are redrawn when the screen is shown again (on_screen_resume)
        feeds = app.feeds
        changed: list[str] = []
        ended = False
        for rid in list(self._live_dirty):
            feed = feeds.get(rid)
            if feed is None:
                continue
            self._live_dirty.discard(rid)
            st = feed.state()
            self.states[rid] = st
            if st.final:
                self.live.discard(rid)
                ended = True
            changed.append(rid)
        if ended or (changed and (self.query_text or self.sort_by != "run" or self.sort_reverse)):
            self.show_runs()
            return
        rows = {r.id: r for r in self.nb.runs}
        columns = self.shown_columns()
        table = self.query_one("#runs", CursorTable)
        for rid in {*changed, *self.live}:  # a running run's time column moves on by itself
            if rid not in self.views:
                continue
            v = view_of(rid, rows.get(rid), self.states.get(rid), feeds.loading(rid), self.meta.get(rid))
            self.views[rid] = v
            if rid in self._order:
                put_row(table, self._shown, rid, v.cells()[: len(columns)], columns)
        if self.live:
            self.show_titles(len(self.views), len(self._order))
        self.show_detail()

    def wants_feed(self, run_id: str) -> bool:
        """Only news of running runs concerns the table (their reader brings status and progress)."""
        return run_id in self.live

    @on(NotebookChanged)
    def notebook_changed(self) -> None:
        self.show_notebook()
        self.load_states()

    def action_reload(self) -> None:
        app_of(self).reload_notebook()

    # ---- drawing

    def show_notebook(self) -> None:
        app = app_of(self)
        nb = self.nb
        self.query_one("#summary", TextBox).show(summary(nb, app.notebook_error, app.notebook_partial))
        self.query_one("#variants", TextBox).show(variants(nb))
        self.query_one("#decisions", TextBox).show(
            decisions(nb, app.notebook_decisions if app.notebook_partial else None)
        )
        self.query_one("#sheet", TextBox).show(sheet(nb))
        self.query_one("#notes").display = not app.notebook_error  # its keys (d, o) wait for a readable file
        self.show_runs()

    def show_runs(self) -> None:
        app = app_of(self)
        table = self.query_one("#runs", CursorTable)
        rows = {r.id: r for r in self.nb.runs}
        ids = list(rows) + [rid for rid in self.states if rid not in rows]
        feeds = app.feeds
        self.views = {
            rid: view_of(rid, rows.get(rid), self.states.get(rid), feeds.loading(rid), self.meta.get(rid))
            for rid in ids
        }
        visible = (
            [v for v in self.views.values() if matches(v, self.query_text)]
            if self.query_text
            else list(self.views.values())
        )
        if self.sort_by != "run" or self.sort_reverse:
            visible.sort(key=sort_key(self.sort_by), reverse=self.sort_reverse)
        if not self._order and len(visible) > FIRST_ROWS:
            # The first frame waits for every row added (the table measures each cell): a screenful
            # now, the other rows at the end of the table just after it is painted.
            visible = visible[:FIRST_ROWS]
            self.call_after_refresh(self.show_runs)
        order = [v.id for v in visible]
        columns = self.shown_columns()
        with self.app.batch_update():
            if order[: len(self._order)] != self._order:
                # The rows shown are not the start of the new order (a filter, a sort, a run gone):
                # rebuild, keeping the cursor's run. New runs at the end are only added.
                keep = table.cursor_key()
                table.clear()
                self._shown = {}
                for v in visible:
                    put_row(table, self._shown, v.id, v.cells()[: len(columns)], columns)
                if keep is not None:
                    table.move_to(keep)
            else:
                for v in visible:
                    put_row(table, self._shown, v.id, v.cells()[: len(columns)], columns)
            self._order = order
            self.show_titles(len(ids), len(order))
            empty = self.query_one("#empty", TextBox)
            if empty.display != (not ids):
                empty.display = not ids
            if not ids:
                empty.show(empty_hint(bool(app.notebook_error)))
            self.show_detail()

    def show_titles(self, total: int, shown: int) -> None:
        table = self.query_one("#runs", CursorTable)
        running = sorted((rid for rid, v in self.views.items() if v.status == "running"), key=runs.order_key)
        title = f"runs ({shown} of {total})" if shown != total else f"runs ({total})"
        if self.sort_by != "run" or self.sort_reverse:
            title += f"  sorted by {self.sort_by}" + (" \u2193" if self.sort_reverse else "")
        if running:
            more = f" +{len(running) - 4}" if len(running) > 4 else ""
            title += f"  running: {', '.join(running[:4])}{more}"
        if str(table.border_title or "") != title:
            table.border_title = Text(title)
        series = app_of(self).series
        status = series.status()
        if status and series.series is not None and not series.series.done:
            eta = pg.series_eta(series.series, app_of(self).feeds)
            status += f", {eta}" if eta else ""
        if str(table.border_subtitle or "") != status:
            table.border_subtitle = Text(status)

    def show_detail(self) -> None:
        """The line under the table: the selected run's stop reason and progress."""
        line = self.query_one("#run-detail", TextBox)
        rid = self.query_one("#runs", CursorTable).cursor_key()
        v = self.views.get(rid) if rid else None
        if v is None:
            line.show(Text("no run selected", style="dim") if self.views else Text())
            return
        out = detail_text(v, app_of(self).feeds.get(v.id))
        line.show(out)

    @on(DataTable.RowHighlighted, "#runs")
    def row_highlighted(self) -> None:
        self.show_detail()

    def selected_run(self) -> str | None:
        return self.query_one("#runs", CursorTable).cursor_key()

    # ---- filter, sort, jumps

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.disabled = False
        box.display = True
        box.focus()

    @on(Input.Changed, "#filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value.strip()
        self.show_runs()

    @on(Input.Submitted, "#filter")
    def filter_done(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = bool(self.query_text)
        box.disabled = not self.query_text
        self.query_one("#runs", CursorTable).focus()

    def key_escape(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_focus or self.query_text:
            box.value = ""
            box.display = False
            box.disabled = True
            self.query_text = ""
            self.show_runs()
            self.query_one("#runs", CursorTable).focus()

    def action_sort(self, reverse: bool = False) -> None:
        if reverse:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_by = SORTS[(SORTS.index(self.sort_by) + 1) % len(SORTS)]
            self.sort_reverse = self.sort_by in ("peak", "time")  # the largest first
        self.show_runs()

    def action_next(self, which: str) -> None:
        table = self.query_one("#runs", CursorTable)
        if not self._order:
            return
        start = table.cursor_row
        n = len(self._order)
        for step in range(1, n + 1):
            rid = self._order[(start + step) % n]
            status = self.views[rid].status
            if (which == "running" and status == "running") or (which == "bad" and status in sty.BAD_STATUSES):
                table.move_cursor(row=(start + step) % n)
                return
        self.notify("no running run" if which == "running" else "no failed, diverged or crashed run", timeout=3)

    # ---- actions

    @on(DataTable.RowSelected, "#runs")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        app_of(self).open_run(str(event.row_key.value))

    def action_open(self) -> None:
        if rid := self.selected_run():
            app_of(self).open_run(rid)

    def action_data(self) -> None:
        if rid := self.selected_run():
            app_of(self).open_data(rid)
        else:
            self.notify("no run yet: start a pilot with p", severity="warning")

    def action_variant(self) -> None:
        rid = self.selected_run()
        app_of(self).action_variant(self.views[rid].variant if rid in self.views else "")

    def action_note(self, kind: str) -> None:
        app_of(self).action_note(kind, self.selected_run() or "")

    def action_verdict(self) -> None:
        rid = self.selected_run()
        if rid is None:
            self.notify("no run selected", severity="warning")
        elif rid not in {r.id for r in self.nb.runs}:
            self.notify(f"{rid} has no row in campaign.toml, so it cannot take a verdict", severity="warning")
        else:
            app_of(self).set_verdict(rid)
