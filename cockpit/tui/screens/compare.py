"""Compare variants: ``cockpit compare``'s tables, and the loss curves of chosen runs overlaid.

Two views, switched with ``t`` and ``l`` (or the tabs): the tables (quality
across seeds per variant with every seed's value and "not distinguishable"
flags, the runs that did not complete with their reasons, memory and time per
phase side by side with the reference, the flags of a variant that changed the
question), laid out for the terminal's width; and the curves: the campaign's
train runs in a list (space chooses a run, ``a`` all, ``n`` none), their loss
per update overlaid, each validation point drawn as the run's marker. A
variant has one colour, each of its runs a marker of its own (``c`` gives
each run a colour of its own); the list is the legend. A variant with more
than three chosen seeds is drawn as its mean with a min-max band; ``s``
smooths the curves, ``y`` puts the loss on a log scale.

Everything is read in worker threads from the run folders, read-only, through
the app's cache (a finished run is read once) and the running runs' readers;
a curve is read only once it is chosen. While a train run is running, the
screen reads again every few seconds.
"""

from __future__ import annotations

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, SelectionList, Static, TabbedContent, TabPane
from textual.widgets.selection_list import Selection

from ... import runs
from ...schema import Event
from .. import comparetables
from .. import comparison as cmp
from .. import style as sty
from ..api import app_of
from ..feeds import Feeds
from ..messages import Compared, CurvesRead, NotebookChanged
from ..plain import clean_line, one_line
from ..widgets.checks import CheckList
from ..widgets.footer import FittingFooter
from ..widgets.plot import BraillePlot, Line
from .run import NARROW

REFRESH_S = 3.0  # while a train run is running


def table_width(scroll_width: int, screen_width: int) -> int:
    """The width the tables are laid out for: the scroll's less its scroll bar (before the first
    layout the scroll is the screen's width less 2)."""
    return (scroll_width or screen_width - 2) - 2


def live_snapshots(feeds: Feeds) -> list[tuple[str, list[Event], runs.RunState]]:
    """The running runs as their readers hold them, for a comparison read in a worker (UI thread)."""
    out = []
    for rid in feeds.ids:
        feed = feeds.get(rid)
        if feed is not None and feed.end is None:
            out.append((rid, feed.events_for_compare(), feed.state()))
    return out


class CompareScreen(Screen[None]):
    HELP_SECTION = "Compare"
    BINDINGS = [
        Binding("escape,b", "app.pop_screen", "Back", id="back"),
        Binding("t", "view('tables')", "Tables", id="tables"),
        Binding("l", "view('curves')", "Curves", id="curves"),
        Binding("a", "choose_all", "All", id="all"),
        Binding("n", "choose_none", "None", id="none"),
        Binding("z", "zoom", "Zoom", id="zoom"),
        Binding("s", "smooth", "Smooth", id="smooth"),
        Binding("y", "log_y", "Log y", id="log-y"),
        Binding("c", "colours", "Colours", id="colours"),
        Binding("o", "open", "Open run", id="open"),
        Binding("m", "app.toggle_maximize", "Max", id="maximize", show=False),
        Binding("r", "reload", "Reload", id="reload", show=False),
    ]

    def __init__(self, view: str = "tables") -> None:
        super().__init__()
        self.initial = view
        self.data: cmp.Comparison | None = None
        self.curves: list[cmp.Curve] = []
        self.chosen: set[str] | None = None  # None until the first read: then the default selection
        self._known: set[str] = set()  # runs listed so far
        self._loaded: dict[str, tuple[list[float], list[float], list[tuple[float, float]]]] = {}
        self._reading: set[str] = set()
        self.zoom = True  # a diverged run runs off the top instead of flattening every other curve
        self.per_run = False  # colours: one per variant (markers tell its runs apart), or one per run
        self.smooth = False
        self.log_y = False
        self._listed: tuple[tuple[str, str, str], ...] = ()
        self._width = 0
        self._curves_due = False

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial=self.initial, id="compare-tabs"):
            with TabPane("Tables (t)", id="tables"), VerticalScroll(id="compare-scroll"):
                yield Static("reading the runs ...", id="compare-tables")
            with TabPane("Loss curves (l)", id="curves"), Horizontal(id="curves-body"):
                yield CheckList[str](id="curve-runs")
                with Vertical(id="curve-side"):
                    yield BraillePlot("loss", zero_based=False, id="curve-plot")
                    yield Static(id="curve-legend")
        yield FittingFooter(compact=True)

    def on_mount(self) -> None:
        self.set_class(self.app.size.width < NARROW, "-narrow")
        self.sub_title = clean_line(f"{app_of(self).notebook.campaign.name} / compare", 80)
        plot = self.query_one("#curve-plot", BraillePlot)
        plot.legend = False
        plot.x_fmt = lambda x: f"update {x:.0f}"
        plot.empty_text = "no run chosen: space chooses the run under the cursor, a all"
        self.query_one("#curve-runs", SelectionList).border_title = "runs (space)"
        ahead = app_of(self).cache.compared  # read before (or ahead): shown now, replaced when read again
        if ahead is not None:
            self.compared(Compared(ahead.data, ahead.curves, tables=(ahead.width, ahead.tables)))
        self.load()
        self.set_interval(REFRESH_S, self.refresh_if_running)
        self.focus_view(self.initial)

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < NARROW, "-narrow")
        if self.data is not None:
            self.call_after_refresh(self._fit_tables)  # once the scroll has its new width

    def _fit_tables(self) -> None:
        if self.data is not None and self._table_width() != self._width:
            self.show_tables()

    # ---- reading

    def load(self) -> None:
        """Read the comparison in a worker: running runs from their readers, the others from the cache."""
        app = app_of(self)
        nb, cache, width = app.notebook, app.cache, self._table_width()
        snapshots = live_snapshots(app.feeds)

        def work() -> None:
            try:
                got = cmp.read(nb, cache, snapshots, width)
            except Exception as exc:  # noqa: BLE001 - shown on the screen, never a crash of the TUI
                self.post_message(Compared(None, [], f"{type(exc).__name__}: {exc}"))
                return
            cache.compared = got
            self.post_message(Compared(got.data, got.curves, tables=(got.width, got.tables)))

        self.run_worker(work, thread=True, exclusive=True, group="compare", exit_on_error=False, description="compare")

    def read_curves(self, ids: list[str]) -> None:
        """Read the curves of these runs in a worker (each once; a running run's again at every refresh)."""
        ids = [rid for rid in ids if rid not in self._reading]
        if not ids:
            return
        self._reading |= set(ids)
        cdir = app_of(self).campaign_dir
        by_id = {c.id: c for c in self.curves}
        wanted = [by_id[rid] for rid in ids if rid in by_id]

        def work() -> None:
            out = {}
            for c in wanted:
                loaded = cmp.load(cmp.Curve(c.id, c.variant, c.seed, c.status, "", None, "", ""), cdir)
                out[c.id] = (loaded.steps, loaded.loss, loaded.evals)
            self.post_message(CurvesRead(out))

        self.run_worker(work, thread=True, group="curves", exit_on_error=False, description="read loss curves")

    def refresh_if_running(self) -> None:
        if any(c.status == "running" for c in self.curves):
            self.load()

    @on(Compared)
    def compared(self, message: Compared) -> None:
        if message.error:
            self.query_one("#compare-tables", Static).update(
                one_line(f"the comparison could not be read: {message.error}", style="bold red", limit=2000)
            )
            return
        self.data, self.curves = message.data, message.curves
        for c in self.curves:
            if c.status == "running":
                self._loaded.pop(c.id, None)  # its curve grows: read again
        # The default choice on opening, and for each run that appears later (a series going on);
        # a run the user took out stays out.
        new = {c.id for c in self.curves} - self._known
        defaults = set(cmp.default_selection(self.curves, self.data))
        self.chosen = (self.chosen or set()) | (defaults & new)
        self._known |= new
        self.show_tables(message.tables)
        if self.query_one("#compare-tabs", TabbedContent).active == "curves":
            self.show_list()
            self.show_curves()  # the list of a thousand runs is filled only when the curves are looked at

    @on(CurvesRead)
    def curves_read(self, message: CurvesRead) -> None:
        self._reading -= set(message.curves)
        self._loaded.update(message.curves)
        self.show_curves()

    @on(NotebookChanged)
    def notebook_changed(self) -> None:
        self.load()

    # ---- drawing

    def _table_width(self) -> int:
        return table_width(self.query_one("#compare-scroll", VerticalScroll).size.width, self.app.size.width)

    def show_tables(self, laid: tuple[int, Text] | None = None) -> None:
        """The tables at the current width: as the worker laid them out when that is still the width."""
        if self.data is None:
            return
        width = self._table_width()
        self._width = width  # the width the tables on screen are laid out for
        if laid is None or laid[0] != width:
            laid = (width, comparetables.laid_out(comparetables.tables(self.data, width), width))
        self.query_one("#compare-tables", Static).update(laid[1])

    def show_list(self) -> None:
        listed = tuple((c.id, c.status, c.look(self.per_run)) for c in self.curves)
        if listed == self._listed:
            return
        self._listed = listed
        box = self.query_one("#curve-runs", SelectionList)
        highlighted = box.highlighted
        box.clear_options()
        box.add_options([Selection(entry(c, self.per_run), c.id, c.id in (self.chosen or set())) for c in self.curves])
        if box.option_count:  # a cursor from the start: space works at once
            box.highlighted = min(highlighted or 0, box.option_count - 1)
        box.border_title = Text(f"runs ({len(self.curves)}) space")

    def show_curves(self) -> None:
        plot = self.query_one("#curve-plot", BraillePlot)
        chosen = [c for c in self.curves if c.id in (self.chosen or set())]
        missing = [c.id for c in chosen if c.id not in self._loaded]
        if missing:
            self.read_curves(missing)
        shown = []
        for c in chosen:
            got = self._loaded.get(c.id)
            if got is not None:
                c.steps, c.loss, c.evals = got
                shown.append(c)
        bands, singles = cmp.bands(shown)
        lines = [
            Line(
                f"{b.variant} mean of {len(b.runs)}",
                b.style,
                b.steps,
                self._y(b.mean),
                lo=self._y(b.lo),
                hi=self._y(b.hi),
            )
            for b in bands
        ]
        lines += [
            Line(c.label(), c.look(self.per_run), c.steps, self._y(c.loss), points=c.evals, marker=c.marker)
            for c in singles
        ]
        top = cmp.zoom_top(shown) if self.zoom else None
        plot.log_y = self.log_y
        toggles = [
            "z: full range" if top else "",
            "smoothed (s)" if self.smooth else "",
            "log y (y)" if self.log_y else "",
        ]
        plot.title = "loss by update, validation as markers" + "".join(f"  {t}" for t in toggles if t)
        plot.set_data(lines, y_max=top)
        waiting = f"reading {len(missing)} curves ..." if missing else ""
        self.query_one("#curve-legend", Static).update(legend(singles, self.per_run, bands, waiting))

    def _y(self, values: list[float]) -> list[float]:
        return cmp.smooth(values) if self.smooth else values

    # ---- actions

    def focus_view(self, view: str) -> None:
        if view == "curves":
            self.query_one("#curve-runs", SelectionList).focus()
        else:
            self.query_one("#compare-scroll", VerticalScroll).focus()

    def action_view(self, view: str) -> None:
        self.query_one("#compare-tabs", TabbedContent).active = view
        self.focus_view(view)

    @on(TabbedContent.TabActivated)
    def tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id:
            self.focus_view(event.pane.id)
        if event.pane.id == "curves" and self.data is not None:
            self.show_list()
            self.show_curves()

    @on(SelectionList.SelectedChanged, "#curve-runs")
    def selection_changed(self, event: SelectionList.SelectedChanged) -> None:
        # Filling the list sends one of these per chosen run: draw once, after the last.
        chosen = set(event.selection_list.selected)
        if chosen == self.chosen:
            return
        self.chosen = chosen
        if not self._curves_due:
            self._curves_due = True
            self.call_after_refresh(self._draw_due)

    def _draw_due(self) -> None:
        self._curves_due = False
        self.show_curves()

    def action_choose_all(self) -> None:
        self.action_view("curves")
        self.query_one("#curve-runs", SelectionList).select_all()

    def action_choose_none(self) -> None:
        self.action_view("curves")
        self.query_one("#curve-runs", SelectionList).deselect_all()

    def action_zoom(self) -> None:
        self.zoom = not self.zoom
        self.action_view("curves")
        self.show_curves()

    def action_smooth(self) -> None:
        self.smooth = not self.smooth
        self.action_view("curves")
        self.show_curves()

    def action_log_y(self) -> None:
        self.log_y = not self.log_y
        self.action_view("curves")
        self.show_curves()

    def action_colours(self) -> None:
        self.per_run = not self.per_run
        self.action_view("curves")
        self.show_list()
        self.show_curves()
        self.notify("a colour per run" if self.per_run else "a colour per variant, a marker per run", timeout=3)

    def action_open(self) -> None:
        box = self.query_one("#curve-runs", SelectionList)
        if box.highlighted is None or not box.option_count:
            self.notify("no run under the cursor: l shows the runs", severity="warning")
            return
        app_of(self).open_run(str(box.get_option_at_index(box.highlighted).value))

    def action_reload(self) -> None:
        self.load()


def entry(c: cmp.Curve, per_run: bool = False) -> Text:
    """A run in the list: its marker in its colour (the legend), id, variant, seed, outcome."""
    out = Text()
    out.append(f"{c.marker} ", style=f"bold {c.look(per_run)}")
    out.append(f"{c.id} ", style="bold")
    out.append_text(one_line(f"{c.variant} s{c.seed} ", limit=30))
    if c.status == "completed" and c.value is not None:
        out.append(f"{c.value:.4g}")
    else:
        out.append_text(sty.status_text(clean_line(c.status, 20)))
    return out


def legend(shown: list[cmp.Curve], per_run: bool = False, bands: list[cmp.Band] | None = None, note: str = "") -> Text:
    """The chosen runs under the plot: colour and markers by variant (or each run), the bands, and the
    reason of every run that ended badly."""
    out = Text()
    for i, b in enumerate(bands or []):
        if i:
            out.append("  ")
        out.append("\u2501\u2501 ", style=b.style)
        out.append_text(one_line(b.variant, style="bold", limit=30))
        out.append(f" mean, band min-max of {len(b.runs)} seeds", style=b.style)
    if bands and shown:
        out.append("  ")
    if per_run:
        for i, c in enumerate(shown):
            if i:
                out.append("  ")
            out.append(f"{c.marker}\u2501 ", style=c.look(True))
            out.append_text(one_line(f"{c.id} s{c.seed}", limit=30))
    else:
        variants = dict.fromkeys(c.variant for c in shown)
        for i, vid in enumerate(variants):
            if i:
                out.append("  ")
            style = next(c.style for c in shown if c.variant == vid)
            out.append("\u2501\u2501 ", style=style)
            out.append_text(one_line(vid, style="bold", limit=30))
            marks = " ".join(f"{c.marker}s{c.seed}" for c in shown if c.variant == vid)
            out.append(f" {marks}", style=style)
    for c in shown:
        if c.status not in ("completed", "running"):
            said = c.stop_reason.startswith(c.status)
            out.append("\n")
            out.append_text(
                one_line(
                    f"{c.marker} {c.id} " + ("" if said else f"{c.status}: "), style=f"bold {c.look(per_run)}", limit=60
                )
            )
            out.append_text(one_line(c.stop_reason or "no stop reason recorded", style="dim", limit=300))
    if note:
        out.append(f"\n{note}", style="dim")
    return out
