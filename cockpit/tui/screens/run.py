"""One run, live or finished, read from its folder: gates, memory, loss, log.

Reattaching is the same as attaching: the screen tails events.jsonl from the
start, so a pilot started before this TUI (or before an SSH drop) shows its
whole history, then its new events. A timer drains one bounded batch of
events per tick and redraws only the widgets whose data changed, inside one
``batch_update``: however fast the pilot writes, the screen repaints at most
once per tick and each tick costs a bounded parse.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Log, Static

from ... import events as ev
from ... import runs
from .. import format as fm
from ..api import app_of
from ..ingest import RunFeed
from ..messages import StopDone
from ..widgets.gates import GateTable
from ..widgets.plot import BraillePlot, Line, Mark

GPU_STYLES = ("green", "bright_green", "spring_green3", "chartreuse3")
ATTACH_S = 1.0  # reading a run's history on opening it may take this long before the first frame
CHART_EVERY_S = 0.5  # charts redraw at most twice a second; gates and log at every tick


class RunScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,b", "app.pop_screen", "Back", id="back"),
        Binding("x", "stop", "Stop", id="stop"),
        Binding("i", "data", "Data", id="data"),
        Binding("enter", "gate", "Gate", id="gate", show=False),
        Binding("g", "app.device", "GPUs", id="gpus"),
    ]

    noun = "pilot"

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.rdir: Path = Path()
        self.feed: RunFeed | None = None
        self.alive = False
        self._log_shown = 0
        self._output_shown = False
        self._charts_pending: set[str] = set()
        self._charts_drawn = float("-inf")

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="run-head")
        with Horizontal(id="run-body"):
            yield GateTable(id="gates")
            with Vertical(id="charts"):
                yield BraillePlot("memory", fmt=_mib_label, id="mem")
                yield BraillePlot("loss", zero_based=False, id="loss")
        yield Log(id="log", max_lines=500, highlight=False)
        yield Footer()

    def on_mount(self) -> None:
        self.attach()  # Textual calls on_mount of every class in the MRO: subclasses override attach()

    def attach(self) -> None:
        self.rdir = runs.run_dir(app_of(self).campaign_dir, self.run_id)
        self.feed = RunFeed(self.rdir / ev.EVENTS_FILE)
        self.sub_title = f"{app_of(self).notebook.campaign.name} / {self.run_id}"
        self.check_alive()
        self.tick(attach_s=ATTACH_S)
        self.set_interval(app_of(self).timing.events_s, self.tick)
        self.set_interval(1.0, self.check_alive)
        self.query_one(GateTable).focus()

    # ---- reading

    def check_alive(self) -> None:
        if self.feed is not None and self.feed.end is not None:
            self.alive = False
            return
        was = self.alive
        self.alive = runs.is_alive(self.rdir)
        if was != self.alive:
            self.show_head()

    def tick(self, attach_s: float | None = None) -> None:
        feed = self.feed
        if feed is None:
            return
        dirty = feed.poll() if attach_s is None else feed.catch_up(attach_s)
        behind = feed.behind_bytes
        self._charts_pending |= dirty & {"mem", "loss"}
        now = time.monotonic()
        charts = self._charts_pending if now - self._charts_drawn >= CHART_EVERY_S else set()
        if not dirty and not behind and not charts:
            return
        with self.app.batch_update():
            if charts:
                self._charts_drawn = now
                self._charts_pending = set()
            self.redraw(dirty, charts, behind)

    def redraw(self, dirty: set[str], charts: set[str], behind: int) -> None:
        """Redraw what changed (inside one batch_update); charts only when their turn has come."""
        if "gates" in dirty and self.feed is not None:
            self.query_one(GateTable).show(self.feed)
        if "mem" in charts:
            self.show_memory()
        if "loss" in charts:
            self.show_loss()
        if "log" in dirty:
            self.show_log()
        self.show_head(behind)

    # ---- drawing

    def status(self) -> str:
        feed = self.feed
        if feed is not None and feed.end is not None:
            return str(feed.end.get("status", "error"))
        if self.alive:
            return ev.Status.RUNNING.value
        if feed is not None and feed.behind_bytes:
            return "reading"  # not crashed until its history is read: the end may be in it
        if feed is None or (feed.start is None and runs.process_info(self.rdir) is None):
            return ev.Status.CREATED.value
        return ev.Status.CRASHED.value

    def show_head(self, behind: int = 0) -> None:
        feed = self.feed
        if feed is None:
            return
        start = feed.start or {}
        status = self.status()
        out = fm.run_head(self.run_id, start, status)
        phase = (feed.end or {}).get("phase") or feed.phase
        done = sum(1 for p in feed.phases if p in feed.gates)
        out.append(f"  {done}/{len(feed.phases)} gates  phase {phase or '-'}")
        if feed.first_t is not None:
            end_t = feed.last_t if status != "running" else time.time()
            out.append(f"  {fm.duration((end_t or feed.first_t) - feed.first_t)}")
        reason = self.crash_reason(status, phase)
        if reason:
            out.append(f"\n{reason}", style="dim" if status == "passed" else "bold")
        elif status == "running":
            out.append("\nx stops it; quitting Cockpit leaves it running", style="dim")
        if feed.gates:
            out.append(f"  ({self.query_one(GateTable).scale_label})", style="dim")
        self.finish_head(out, status, behind)

    def finish_head(self, out: Text, status: str, behind: int) -> None:
        """Shared end of the header: the backlog being read, then the output tail of a failed run."""
        if behind:
            out.append(f"  catching up: {behind / 2**20:.1f} MiB of events to read", style="yellow")
        self.query_one("#run-head", Static).update(out)
        if status in (ev.Status.CRASHED.value, ev.Status.ERROR.value) and not self._output_shown:
            self.show_output_tail()

    def crash_reason(self, status: str, phase: str | None) -> str:
        reason = ((self.feed.end or {}).get("stop_reason") or "") if self.feed else ""
        if status == ev.Status.CRASHED.value:
            reason = f"process gone without a final event during phase {phase or 'start-up'}"
        return reason

    def show_memory(self) -> None:
        feed = self.feed
        assert feed is not None
        lines: list[Line] = []
        gpus = sorted(k for k in feed.mem if k.startswith("gpu"))
        for i, key in enumerate(gpus):
            s = feed.mem[key]
            lines.append(Line(f"{key} NVML", GPU_STYLES[i % len(GPU_STYLES)], s.t, s.y))
        for key, label, style in (("reserved", "reserved", "yellow"), ("alloc", "allocated", "cyan")):
            if key in feed.mem:
                lines.append(Line(label, style, feed.mem[key].t, feed.mem[key].y))
        title = "GPU memory"
        if not gpus:
            title = "memory: no GPU, process RSS"
            if "rss" in feed.mem:
                lines.append(Line("RSS", "magenta", feed.mem["rss"].t, feed.mem["rss"].y))
        marks = [Mark(m.t, m.phase) for m in feed.marks]
        self.query_one("#mem", BraillePlot).title = title
        self.query_one("#mem", BraillePlot).set_data(lines, marks)

    def show_loss(self) -> None:
        feed = self.feed
        assert feed is not None
        plot = self.query_one("#loss", BraillePlot)
        plot.empty_text = "no optimizer steps yet"
        if feed.loss.y:
            plot.title = f"loss {feed.loss.y[-1]:.3g}"
        plot.set_data([Line("per step", "magenta", feed.loss.t, feed.loss.y)], [Mark(m.t, m.phase) for m in feed.marks])

    def show_log(self) -> None:
        feed = self.feed
        assert feed is not None
        new = feed.log_total - self._log_shown
        if new <= 0:
            return
        lines = list(feed.log)[-min(new, len(feed.log)) :]
        self.query_one(Log).write_lines(lines)
        self._log_shown = feed.log_total

    def show_output_tail(self) -> None:
        self._output_shown = True
        try:
            text = (self.rdir / runs.LOG_FILE).read_text(errors="replace")
        except FileNotFoundError:
            return
        tail = text.splitlines()[-20:]
        if tail:
            self.query_one(Log).write_lines([f"--- last lines of {runs.LOG_FILE}:", *tail])

    # ---- actions

    def action_data(self) -> None:
        app_of(self).open_data(self.run_id)

    def action_gate(self) -> None:
        table = self.query_one(GateTable)
        if table.row_count:
            self.open_gate(str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value))

    @on(DataTable.RowSelected, "#gates")
    def gate_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.open_gate(str(event.row_key.value))

    def open_gate(self, phase: str) -> None:
        from .dialogs import GateScreen

        assert self.feed is not None
        self.app.push_screen(GateScreen(phase, self.feed.gates.get(phase)))

    def action_stop(self) -> None:
        from .dialogs import ConfirmScreen

        if self.status() != ev.Status.RUNNING.value:
            self.notify(f"{self.run_id} is not running ({self.status()})", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.notify(f"stopping {self.run_id}: SIGTERM, then SIGKILL after the grace period")
                self.stop_run()

        self.app.push_screen(
            ConfirmScreen(f"Stop {self.noun} {self.run_id}?\nSIGTERM now, SIGKILL if it is still alive after 10 s."),
            confirmed,
        )

    @work(thread=True, exclusive=True, group="stop", exit_on_error=False, description="stop the run")
    def stop_run(self) -> None:
        self.post_message(StopDone(app_of(self).launcher.stop(self.rdir)))

    def on_stop_done(self, message: StopDone) -> None:
        self.notify(f"{self.run_id}: {message.text}", title="stop")
        self.check_alive()
        self.show_head()


def _mib_label(value: float) -> str:
    m = value / fm.MIB
    return f"{m / 1024:.1f}G" if m >= 10240 else f"{m:.0f}M"
