"""One run, live or finished, read from its folder: gates, memory, loss, log.

Reattaching is the same as attaching: the run's one reader (``feeds``, shared
with the campaign table) reads its events.jsonl from the start in a worker,
then only the new bytes, so a pilot started before this TUI (or before an SSH
drop) shows its whole history, then its new events. Widgets redraw only when
their data changed, inside one ``batch_update``; charts at most twice a
second. Below 100 columns the gate table and the charts are stacked.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Header

from ... import events as ev
from ... import runs
from ...schema import Event
from .. import format as fm
from .. import progress as pg
from .. import style as sty
from ..api import app_of
from ..feeds import ALL
from ..ingest import RunFeed
from ..messages import FeedsChanged, StopDone
from ..plain import clean_line, one_line
from ..widgets.footer import FittingFooter
from ..widgets.gates import GateTable
from ..widgets.plot import BraillePlot, Line, Mark
from ..widgets.tail import TailLog
from ..widgets.text import TextBox

GPU_STYLES = ("green", "bright_green", "spring_green3", "chartreuse3")
CHART_EVERY_S = 1.0  # charts redraw at most once a second (each is a few ms of Python); gates and log at once
CHART_MOST_S = 5.0  # ... and at least this often, however long the run
CHART_DOTS = 100  # about how many dot columns a chart has across
NARROW = 100  # below this many columns the panes are stacked
CATCHING_UP = 2**20  # a backlog worth saying (a few lines behind a live writer is the normal state)
EVERY = frozenset({"gates", "status", "mem", "loss", "log", "steps", "evals"})
HEAD = frozenset({"gates", "status", "steps"})  # the aspects the header line shows


class RunScreen(Screen[None]):
    HELP_SECTION = "Run"
    BINDINGS = [
        Binding("escape,b", "app.pop_screen", "Back", id="back"),
        Binding("x", "stop", "Stop", id="stop"),
        Binding("i", "data", "Data", id="data"),
        Binding("enter", "gate", "Gate", id="gate", show=False),
        Binding("m", "app.toggle_maximize", "Max", id="maximize"),
        Binding("g", "app.device", "GPUs", id="gpus"),
    ]

    noun = "pilot"
    FIRST_FOCUS = "#gates"
    follows_live = True  # the app reads its run's events every Intervals.events_s while it is in view

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.rdir: Path = Path()
        self.feed: RunFeed | None = None
        self.state: runs.RunState | None = None
        self.alive = False
        self._log_shown = 0
        self._output_shown = False
        self._charts_pending: set[str] = set()
        self._charts_drawn = float("-inf")
        self._chart_timer: Timer | None = None
        self._meta: runs.RunTable = {}  # run.toml's [run], read once, for the header before the run starts

    def compose(self) -> ComposeResult:
        yield Header()
        yield TextBox(id="run-head")
        yield TextBox(id="run-banner")
        with Horizontal(id="run-body"):
            yield GateTable(id="gates")
            with Vertical(id="charts"):
                yield BraillePlot("memory", fmt=mib_label, id="mem")
                yield BraillePlot("loss", zero_based=False, id="loss")
        yield TailLog(max_lines=500, id="log")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.set_class(self.app.size.width < NARROW, "-narrow")
        self.query_one("#run-banner", TextBox).display = False
        self.attach()  # Textual calls on_mount of every class in the MRO: subclasses override attach()

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < NARROW, "-narrow")

    def wants_feed(self, run_id: str) -> bool:
        """Whether news of this run's reader concerns the screen (the app tells only those that care)."""
        return run_id == self.run_id

    def attach(self) -> None:
        app = app_of(self)
        self.rdir = runs.run_dir(app.campaign_dir, self.run_id)
        self.sub_title = clean_line(f"{app.notebook.campaign.name} / {self.run_id}", 80)
        self.feed = app.feeds.want(self.run_id)
        if self.feed is not None:
            self.apply(set(EVERY))
        else:
            self.show_reading()
        self.set_interval(1.0, self.every_second)
        self.query_one(self.FIRST_FOCUS).focus()

    # ---- reading

    def show_reading(self) -> None:
        try:
            size = (self.rdir / ev.EVENTS_FILE).stat().st_size
        except OSError:
            size = 0
        out = Text()
        out.append(f"{self.run_id} ", style="bold")
        out.append(f"reading events.jsonl ({size / 2**20:.1f} MiB) ...", style="dim")
        self.query_one("#run-head", TextBox).show(out)

    @on(FeedsChanged)
    def feeds_changed(self, message: FeedsChanged) -> None:
        dirty = message.changed.get(self.run_id)
        if not dirty:
            return
        if ALL in dirty:
            self.feed = app_of(self).feeds.get(self.run_id)
            dirty = set(EVERY)
        self.apply(dirty)

    def apply(self, dirty: set[str]) -> None:
        feed = self.feed
        if feed is None:
            return
        if dirty & {"status", "gates"} or self.state is None:
            self.state = feed.state()
        self._charts_pending |= dirty & {"mem", "loss", "steps", "evals"}
        now = time.monotonic()
        charts: set[str] = set()
        if self._charts_pending:
            every = chart_every(feed)
            if now - self._charts_drawn >= every:
                charts, self._charts_pending, self._charts_drawn = self._charts_pending, set(), now
            elif self._chart_timer is None:
                self._chart_timer = self.set_timer(every - (now - self._charts_drawn), self._charts_due)
        with self.app.batch_update():
            self.redraw(dirty, charts)

    def _charts_due(self) -> None:
        self._chart_timer = None
        if self._charts_pending:
            self.apply(set())

    def every_second(self) -> None:
        """The clock-driven parts: is the process alive, the elapsed times, the banner."""
        feed = self.feed
        if feed is None:
            return
        if feed.end is None:
            was = self.alive
            self.alive = runs.is_alive(self.rdir)
            if was != self.alive or self.state is None or not self.state.final:
                self.state = feed.state()
            self.show_gates(feed)
        self.show_head()

    def show_gates(self, feed: RunFeed) -> None:
        self.query_one(GateTable).show(feed, status=self.status())

    def redraw(self, dirty: set[str], charts: set[str]) -> None:
        """Redraw what changed (inside one batch_update); charts only when their turn has come."""
        feed = self.feed
        assert feed is not None
        if dirty & {"gates", "status"}:
            self.show_gates(feed)
        if charts & {"mem"}:
            self.show_memory()
        if charts & {"loss", "steps"}:
            self.show_loss()
        if "log" in dirty:
            self.show_log()
        if dirty & HEAD or not dirty:  # samples alone (20 a second) change nothing in it: every_second has the clock
            self.show_head()

    # ---- drawing

    def status(self) -> str:
        feed, st = self.feed, self.state
        if feed is None or st is None:
            return "reading"
        if not st.final and st.status != ev.Status.RUNNING.value and feed.behind_bytes:
            return "reading"  # not crashed until its history is read: the end may be in it
        return st.status

    def reason(self) -> str:
        return self.state.stop_reason if self.state is not None else ""

    def elapsed(self) -> str:
        feed = self.feed
        if feed is None or feed.first_t is None:
            return ""
        end_t = time.time() if self.status() == "running" else (feed.last_t or feed.first_t)
        return fm.duration(max(0.0, end_t - feed.first_t))

    def show_head(self) -> None:
        feed = self.feed
        if feed is None:
            return
        status = self.status()
        out = fm.run_head(self.run_id, self.known_start(), status)
        out.append(f"  {pg.pilot_progress(feed, status == 'running')}")
        if status != "running":
            out.append_text(one_line(f"  phase {(feed.end or {}).get('phase') or feed.phase or '-'}", limit=60))
        elapsed = self.elapsed()
        if elapsed:
            out.append(f"  {elapsed}")
        reason = self.reason()
        if reason:
            out.append("\n")
            style = "dim" if status in ("passed", "completed") else sty.STATUS_STYLE.get(status, "bold")
            out.append_text(one_line(reason, style=style, limit=400))
        elif status == "running":
            out.append("\nx stops it; quitting Cockpit leaves it running", style="dim")
        if feed.gates:
            out.append(f"  ({self.query_one(GateTable).scale_label})", style="dim")
        self.finish_head(out, status)

    def known_start(self) -> Event:
        """The run_start event; until the process writes it, what run.toml said at creation (variant, seed)."""
        if self.feed is not None and self.feed.start:
            return self.feed.start
        if not self._meta:
            self._meta = runs.run_meta(self.rdir)  # a small file, written before the run is listed
        m = self._meta
        known: Event = {}
        if "variant" in m:
            known["variant"] = m["variant"]
        if "seed" in m:
            known["seed"] = m["seed"]
        if "follows" in m:
            known["follows"] = m["follows"]
        if m.get("kind") == "probe":
            known["run_kind"] = m["kind"]
        return known

    def finish_head(self, out: Text, status: str) -> None:
        """Shared end of the header: the backlog being read, the banner, the output tail of a failed run."""
        feed = self.feed
        behind = feed.behind_bytes if feed is not None else 0
        if behind >= CATCHING_UP:
            out.append(f"  catching up: {behind / 2**20:.1f} MiB of events to read", style="yellow")
        self.query_one("#run-head", TextBox).show(out)
        self.show_banner()
        if status in (ev.Status.CRASHED.value, ev.Status.ERROR.value) and not self._output_shown:
            self.show_output_tail()

    def show_banner(self) -> None:
        """Said once, in a line of its own: a deleted run folder, lines that could not be read."""
        feed = self.feed
        banner = self.query_one("#run-banner", TextBox)
        words: list[str] = []
        if feed is not None and (feed.gone or not self.rdir.is_dir()):
            words.append("the run folder was deleted: what is shown is what was read before")
        if feed is not None and feed.bad_lines:
            n = feed.bad_lines
            words.append(
                f"{n} line{'s' if n != 1 else ''} of events.jsonl could not be read and "
                f"{'were' if n != 1 else 'was'} skipped"
            )
        if banner.display != bool(words):
            banner.display = bool(words)
        if words:
            banner.show(Text("; ".join(words), style="bold yellow"))

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
        lines = [clean_line(x) for x in list(feed.log)[-min(new, len(feed.log)) :]]
        log = self.query_one(TailLog)
        log.write_lines(lines, follow=self._log_shown == 0 or log.at_end)
        self._log_shown = feed.log_total

    def show_output_tail(self) -> None:
        self._output_shown = True
        try:
            text = (self.rdir / runs.LOG_FILE).read_text(errors="replace")
        except OSError:
            return
        tail = text.splitlines()[-20:]
        if tail:
            log = self.query_one(TailLog)
            log.write_lines([f"--- last lines of {runs.LOG_FILE}:", *(clean_line(x) for x in tail)], follow=True)

    # ---- actions

    def action_data(self) -> None:
        app_of(self).open_data(self.run_id)

    def action_gate(self) -> None:
        phase = self.query_one(GateTable).cursor_key()
        if phase:
            self.open_gate(phase)

    @on(DataTable.RowSelected, "#gates")
    def gate_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.open_gate(str(event.row_key.value))

    def open_gate(self, phase: str) -> None:
        from .gatedetail import GateScreen

        if self.feed is not None:
            self.app.push_screen(GateScreen(phase, self.feed.gates.get(phase), self.feed.end))

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
        self.every_second()


def chart_every(feed: RunFeed) -> float:
    """How often the charts are redrawn: once a second, or as often as a dot column's worth of time
    passes when that is longer (an hour of samples across a hundred columns moves a column every 36 s:
    redrawing every second would redraw the same picture), at most every ``CHART_MOST_S``."""
    if feed.first_t is None or feed.last_t is None:
        return CHART_EVERY_S
    return min(CHART_MOST_S, max(CHART_EVERY_S, (feed.last_t - feed.first_t) / CHART_DOTS))


def mib_label(value: float) -> str:
    m = value / fm.MIB
    return f"{m / 1024:.1f}G" if m >= 10240 else f"{m:.0f}M"
