"""Compare variants: ``cockpit compare``'s tables, and the loss curves of chosen runs overlaid.

Two views, switched with ``t`` and ``l`` (or the tabs): the tables (quality
across seeds per variant with every seed's value and "not distinguishable"
flags, the runs that did not complete with their reasons, memory and time per
phase side by side with the reference, the flags of a variant that changed the
question), and the curves: the campaign's train runs in a list (space chooses
a run, ``a`` all, ``n`` none), their loss per update overlaid, each
validation point drawn as the run's marker. A variant has one colour, each of
its runs a marker of its own (``c`` gives each run a colour of its own); the
list is the legend.

Everything is read in a worker thread from the run folders, read-only; while
a train run is running, the screen reads again every few seconds.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, SelectionList, Static, TabbedContent, TabPane
from textual.widgets.selection_list import Selection

from .. import comparison as cmp
from .. import style as sty
from ..api import app_of
from ..messages import Compared, NotebookChanged
from ..widgets.plot import BraillePlot, Line

REFRESH_S = 3.0  # while a train run is running


class CompareScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,b", "app.pop_screen", "Back", id="back"),
        Binding("t", "view('tables')", "Tables", id="tables"),
        Binding("l", "view('curves')", "Curves", id="curves"),
        Binding("a", "choose_all", "All", id="all"),
        Binding("n", "choose_none", "None", id="none"),
        Binding("z", "zoom", "Zoom", id="zoom"),
        Binding("c", "colours", "Colours", id="colours"),
        Binding("o", "open", "Open run", id="open"),
        Binding("r", "reload", "Reload", id="reload", show=False),
    ]

    def __init__(self, view: str = "tables") -> None:
        super().__init__()
        self.initial = view
        self.data: dict[str, Any] | None = None
        self.curves: list[cmp.Curve] = []
        self.chosen: set[str] | None = None  # None until the first read: then the default selection
        self._known: set[str] = set()  # runs listed so far
        self.zoom = True  # a diverged run runs off the top instead of flattening every other curve
        self.per_run = False  # colours: one per variant (markers tell its runs apart), or one per run
        self._listed: tuple[tuple[str, str, str], ...] = ()

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial=self.initial, id="compare-tabs"):
            with TabPane("Tables (t)", id="tables"), VerticalScroll(id="compare-scroll"):
                yield Static("reading the runs ...", id="compare-tables")
            with TabPane("Loss curves (l)", id="curves"), Horizontal(id="curves-body"):
                yield SelectionList[str](id="curve-runs")
                with Vertical(id="curve-side"):
                    yield BraillePlot("loss", zero_based=False, id="curve-plot")
                    yield Static(id="curve-legend")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = f"{app_of(self).notebook.campaign.name} / compare"
        plot = self.query_one("#curve-plot", BraillePlot)
        plot.legend = False
        plot.x_fmt = lambda x: f"update {x:.0f}"
        plot.empty_text = "no run chosen: space chooses the run under the cursor, a all"
        self.query_one("#curve-runs", SelectionList).border_title = "runs (space)"
        self.load()
        self.set_interval(REFRESH_S, self.refresh_if_running)
        self.focus_view(self.initial)

    # ---- reading

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False, description="read the comparison")
    def load(self) -> None:
        from ... import notebook as nbm

        try:
            nb = nbm.load(app_of(self).notebook_path)
            data = cmp.collect(nb)
            curves = cmp.curves(nb, data)
        except Exception as exc:  # noqa: BLE001 - shown on the screen, never a crash of the TUI
            self.post_message(Compared(None, [], f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(Compared(data, curves))

    def refresh_if_running(self) -> None:
        if any(c.status == "running" for c in self.curves):
            self.load()

    def on_compared(self, message: Compared) -> None:
        if message.error:
            self.query_one("#compare-tables", Static).update(
                Text(f"the comparison could not be read: {message.error}", style="bold red")
            )
            return
        self.data, self.curves = message.data, message.curves
        # The default choice on opening, and for each run that appears later (a series going on);
        # a run the user took out stays out.
        new = {c.id for c in self.curves} - self._known
        self.chosen = (self.chosen or set()) | (set(cmp.default_selection(self.curves)) & new)
        self._known |= new
        self.show_tables()
        self.show_list()
        self.show_curves()

    @on(NotebookChanged)
    def notebook_changed(self) -> None:
        self.load()

    # ---- drawing

    def show_tables(self) -> None:
        assert self.data is not None
        items: list[Any] = cmp.table_renderables(self.data)
        if not self.data["quality"]:
            items.append(Text("S on the campaign screen starts a series of variants x seeds", style="dim"))
        self.query_one("#compare-tables", Static).update(Group(*items))

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
        box.border_title = f"runs ({len(self.curves)}) space"

    def show_curves(self) -> None:
        plot = self.query_one("#curve-plot", BraillePlot)
        shown = [c for c in self.curves if c.id in (self.chosen or set())]
        lines = [Line(c.label(), c.look(self.per_run), c.steps, c.loss, points=c.evals, marker=c.marker) for c in shown]
        top = cmp.zoom_top(shown) if self.zoom else None
        plot.title = "loss by update, validation as markers" + ("  z: full range" if top else "")
        plot.set_data(lines, y_max=top)
        self.query_one("#curve-legend", Static).update(legend(shown, self.per_run))

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

    @on(SelectionList.SelectedChanged, "#curve-runs")
    def selection_changed(self, event: SelectionList.SelectedChanged) -> None:
        self.chosen = set(event.selection_list.selected)
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
    out.append(f"{c.variant} s{c.seed} ")
    if c.status == "completed" and c.value is not None:
        out.append(f"{c.value:.4g}")
    else:
        out.append_text(sty.status_text(c.status))
    return out


def legend(shown: list[cmp.Curve], per_run: bool = False) -> Text:
    """The chosen runs under the plot: colour and markers by variant (or each run), and the reason of
    every run that ended badly."""
    out = Text()
    if not shown:
        return out
    if per_run:
        for i, c in enumerate(shown):
            if i:
                out.append("  ")
            out.append(f"{c.marker}\u2501 ", style=c.look(True))
            out.append(f"{c.id} s{c.seed}")
    else:
        variants = dict.fromkeys(c.variant for c in shown)
        for i, vid in enumerate(variants):
            if i:
                out.append("  ")
            style = next(c.style for c in shown if c.variant == vid)
            out.append("\u2501\u2501 ", style=style)
            out.append(vid, style="bold")
            marks = " ".join(f"{c.marker}s{c.seed}" for c in shown if c.variant == vid)
            out.append(f" {marks}", style=style)
    for c in shown:
        if c.status not in ("completed", "running"):
            said = c.stop_reason.startswith(c.status)
            out.append(f"\n{c.marker} {c.id} " + ("" if said else f"{c.status}: "), style=f"bold {c.look(per_run)}")
            out.append(c.stop_reason or "no stop reason recorded", style="dim")
    return out
