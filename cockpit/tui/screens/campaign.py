"""The campaign at a glance: question, what is held constant, batch arithmetic,
runs (status in colour and in words), variants, decisions, selection and conclusion.

Runs come first from the notebook (instant), then from their folders, whose
events a worker thread reads so a large events.jsonl never delays the first
paint; that re-reading repeats every few seconds so a running pilot's row
moves on by itself. Pilots and series (train) runs share the table; the runs
of a series started here appear as soon as they are created, and the table's
bottom border says how far the series is.
"""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from ... import arithmetic, runs
from ... import notebook as nbm
from .. import format as fm
from .. import style as sty
from ..api import app_of
from ..messages import NotebookChanged, RunStates
from ..widgets.keyed import put_row

# Fixed widths: rows change in place as runs progress, and columns must not jump.
RUN_COLUMNS = (
    ("run", "run", 5),
    ("variant", "variant", 8),
    ("seed", "seed", 4),
    ("status", "status", 9),
    ("phase", "phase", 13),
    ("peak", "peak MiB", 8),
    ("time", "time", 7),
    ("verdict", "verdict", 10),
    ("reason", "stop reason", None),
)


class CampaignScreen(Screen[None]):
    BINDINGS = [
        Binding("enter", "open", "Open run", id="open", show=False),
        Binding("p", "app.start_pilot", "Pilot", id="pilot"),
        Binding("S", "app.start_series", "Series", id="series"),
        Binding("C", "app.compare", "Compare", id="compare"),
        Binding("d", "note('decision')", "Decision", id="decision"),
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
        self.states: dict[str, runs.RunState] = {}
        self._shown: dict[str, tuple[str, ...]] = {}
        self._ended: dict[str, runs.RunState] = {}  # only the worker thread touches it

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="summary")
        table: DataTable[Text] = DataTable(id="runs", cursor_type="row")
        yield table
        with VerticalScroll(id="notes"):
            yield Static(id="variants")
            yield Static(id="decisions")
            yield Static(id="sheet")
        yield Footer(compact=True)  # every main key fits in 80 columns

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        for key, label, width in RUN_COLUMNS:
            table.add_column(label, key=key, width=width)
        self.show_notebook()
        self.load_states()
        self.set_interval(app_of(self).timing.runs_s, self.load_states)
        table.focus()

    # ---- data

    @property
    def nb(self) -> nbm.Notebook:
        return app_of(self).notebook

    @work(thread=True, exclusive=True, group="run-states", exit_on_error=False, description="read run folders")
    def load_states(self) -> None:
        # As runs.list_runs, but a run that has ended (its final event written, no rank still running)
        # is read once: a long series does not re-parse every finished run's events every few seconds.
        states: dict[str, runs.RunState] = {}
        for p in runs.run_dirs(app_of(self).campaign_dir):
            st = self._ended.get(p.name) or runs.state(p)
            if st.run_end is not None and st.final:
                self._ended[p.name] = st
            states[p.name] = st
        self.post_message(RunStates(states))

    def on_run_states(self, message: RunStates) -> None:
        self.states = message.states
        self.show_runs()

    @on(NotebookChanged)
    def notebook_changed(self) -> None:
        self.show_notebook()
        self.load_states()

    def action_reload(self) -> None:
        app_of(self).reload_notebook()

    # ---- drawing

    def show_notebook(self) -> None:
        nb = self.nb
        self.query_one("#summary", Static).update(summary(nb))
        self.query_one("#variants", Static).update(variants(nb))
        self.query_one("#decisions", Static).update(decisions(nb))
        self.query_one("#sheet", Static).update(sheet(nb))
        self.show_runs()

    def show_runs(self) -> None:
        table = self.query_one("#runs", DataTable)
        rows = {r.id: r for r in self.nb.runs}
        ids = list(rows) + [rid for rid in self.states if rid not in rows]
        for rid in ids:
            put_row(
                table,
                self._shown,
                rid,
                run_cells(rid, rows.get(rid), self.states.get(rid)),
                [key for key, _, _ in RUN_COLUMNS],
            )
        running = [rid for rid in ids if self.states.get(rid) and self.states[rid].status == "running"]
        table.border_title = f"runs ({len(ids)})" + (f"  running: {', '.join(running)}" if running else "")
        table.border_subtitle = app_of(self).series.status()

    def selected_run(self) -> str | None:
        table = self.query_one("#runs", DataTable)
        if table.row_count == 0:
            return None
        try:
            return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        except Exception:
            return None

    # ---- actions

    @on(DataTable.RowSelected, "#runs")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        app_of(self).open_run(str(event.row_key.value))

    def action_open(self) -> None:
        rid = self.selected_run()
        if rid:
            app_of(self).open_run(rid)

    def action_data(self) -> None:
        rid = self.selected_run()
        if rid:
            app_of(self).open_data(rid)
        else:
            self.notify("no run yet: start a pilot with p", severity="warning")

    def action_note(self, kind: str) -> None:
        app_of(self).action_note(kind, self.selected_run() or "")

    def action_verdict(self) -> None:
        rid = self.selected_run()
        if rid is None:
            self.notify("no run selected", severity="warning")
        elif rid not in {r.id for r in self.nb.runs}:
            self.notify(f"{rid} has no row in campaign.toml: run `cockpit runs` to reconcile", severity="warning")
        else:
            app_of(self).set_verdict(rid)


def run_cells(rid: str, row: nbm.RunRow | None, st: runs.RunState | None) -> tuple[Text, ...]:
    status = st.status if st else (row.status if row else "?")
    phase = (st.phase if st else None) or (row.phase if row else "") or ""
    peak = st.peak_mib if st else None  # the one rule (cockpit.runs): gates and the final event alike
    if peak is None and row is not None:
        peak = row.peak_mib
    secs = st.duration_s if st and st.started is not None else (row.duration_s if row else None)
    reason = (st.stop_reason if st else "") or (row.stop_reason if row else "")
    return (
        Text(rid, style="bold"),
        Text(row.variant if row else "?"),
        Text(str(row.seed) if row else ""),
        sty.status_text(status),
        Text(phase),
        Text(f"{peak:,.0f}" if peak is not None else "-", justify="right"),
        Text(fm.duration(secs)),
        Text(row.verdict if row else "", style="italic"),
        Text(reason, style="dim"),
    )


def summary(nb: nbm.Notebook) -> Text:
    c = nb.campaign
    out = Text()
    out.append("Question ", style="bold")
    out.append(c.question or "(none written: say what this campaign decides)")
    out.append("\nHeld constant ", style="bold")
    out.append(c.held_constant)
    budget = nb.batch.updates or nb.batch.epochs or nb.batch.examples
    out.append(f" ({budget} {c.held_constant})")
    out.append("  quality ", style="bold")
    out.append(f"{c.quality_metric} ({'higher' if c.higher_is_better else 'lower'} is better)")
    b = nb.batch
    try:
        plan = arithmetic.BatchPlan(
            b.microbatch, b.accumulation, b.data_replicas, b.model_parallel, b.dataset_size, b.drop_last
        )
        for name, value in arithmetic.describe(plan)[:2]:
            out.append(f"\n{name.capitalize()} ", style="bold")
            out.append(value)
    except ValueError as exc:
        out.append(f"\nBatch arithmetic: {exc}", style="red")
    return out


def variants(nb: nbm.Notebook) -> Text:
    out = Text("Variants", style="bold underline")
    for v in nb.variants:
        out.append(f"\n {v.id:<10}", style="bold")
        out.append(" reference" if v.reference else " ", style="cyan")
        overrides = ", ".join(f"{k}={val}" for k, val in v.set.items())
        out.append(f" {v.differs}" + (f" ({overrides})" if overrides else ""))
        if v.why:
            out.append(f": {v.why}", style="dim")
    return out


def decisions(nb: nbm.Notebook) -> Text:
    out = Text(f"Decisions and observations ({len(nb.decisions)})", style="bold underline")
    if not nb.decisions:
        out.append("\n none yet: d adds a decision, o an observation", style="dim")
    for d in nb.decisions:
        out.append(f"\n {d.date} ", style="dim")
        out.append(d.kind, style=sty.NOTE_KIND_STYLE.get(d.kind, "bold"))
        if d.runs:
            out.append(f" [{', '.join(d.runs)}]", style="cyan")
        out.append(f" {d.text}")
    return out


def sheet(nb: nbm.Notebook) -> Text:
    out = Text("Selection sheet", style="bold underline")
    out.append("  (s edits)", style="dim")
    s = nb.selection
    filled = [(k, v) for k, v in vars(s).items() if v not in (None, "")]
    if not filled:
        out.append("\n not filled yet", style="dim")
    for k, v in filled:
        out.append(f"\n {k.replace('_', ' ')}: ", style="bold")
        out.append(str(v))
    out.append("\nConclusion", style="bold underline")
    out.append("  (c edits)", style="dim")
    c = nb.conclusion
    if c.text or c.chosen_variant:
        if c.chosen_variant:
            out.append(f"\n chosen: {c.chosen_variant}", style="bold green")
        if c.text:
            out.append(f"\n {c.text}")
        if c.date:
            out.append(f"\n {c.date}", style="dim")
    else:
        out.append("\n not written yet", style="dim")
    return out
