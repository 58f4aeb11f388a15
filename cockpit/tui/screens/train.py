"""One series run (kind "train"), live or finished: loss by update, validation points, stop reason.

A train run has no gates: it trains to its budget or until a stop rule ends
it. The screen follows its events.jsonl like the pilot screen (same bounded
ingest, same reattaching): the latest step (update, loss, lr, gradient norm,
time per update) and the stop reason in the head; the validation points in a
table and drawn as markers over the training loss; memory over time; the log
with each validation and the end. When the run has written ``metrics.json``
(at its end, whatever the outcome), its final and best validation loss, the
task's metrics and the mean times are shown as the run recorded them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable
from typing import TypeGuard

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Header

from ... import runs
from ...schema import JSON, Event, JSONObject
from .. import format as fm
from .. import progress as pg
from .. import style as sty
from ..api import app_of
from ..ingest import RunFeed
from ..plain import clean_line, one_line
from ..widgets.footer import FittingFooter
from ..widgets.keyed import put_row
from ..widgets.plot import BraillePlot, Line
from ..widgets.table import CursorTable
from ..widgets.tail import TailLog
from ..widgets.text import TextBox
from .run import RunScreen, mib_label


class TrainRunScreen(RunScreen):
    HELP_SECTION = "Series run"
    noun = "run"
    FIRST_FOCUS = "#evals"

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.metrics: dict[str, JSON] | None = None  # metrics.json
        self._eval_shown: dict[str, tuple[Hashable, ...]] = {}
        self._eval_columns: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield TextBox(id="run-head")
        yield TextBox(id="run-banner")
        with Horizontal(id="train-body"):
            with Vertical(id="train-side"):
                yield CursorTable(id="evals", zebra_stripes=False)
                yield TextBox(id="train-metrics")
            with Vertical(id="charts"):
                yield BraillePlot("loss", zero_based=False, id="loss")
                yield BraillePlot("memory", fmt=mib_label, id="mem")
        yield TailLog(max_lines=500, id="log")
        yield FittingFooter()

    def attach(self) -> None:
        plot = self.query_one("#loss", BraillePlot)
        plot.x_fmt = lambda x: f"update {x:.0f}"
        plot.empty_text = "no update yet"
        table = self.query_one("#evals", CursorTable)
        table.border_title = "validation"
        self.rdir = runs.run_dir(app_of(self).campaign_dir, self.run_id)
        self.read_metrics()
        super().attach()

    # ---- reading

    def read_metrics(self) -> None:
        """metrics.json, written once at the run's end (small: read on the UI thread)."""
        try:
            data = json.loads((self.rdir / runs.METRICS_FILE).read_text())
        except (ValueError, OSError, RecursionError):
            data = None
        self.metrics = data if isinstance(data, dict) else None

    def redraw(self, dirty: set[str], charts: set[str]) -> None:
        if "status" in dirty and self.feed is not None and self.feed.end is not None and self.metrics is None:
            self.read_metrics()
        if dirty & {"evals", "status"}:
            self.show_evals()
        if charts & {"mem"}:
            self.show_memory()
        if charts & {"loss", "steps", "evals"}:
            self.show_loss()
        if "log" in dirty:
            self.show_log()
        self.show_head()

    # ---- drawing

    def show_head(self) -> None:
        feed = self.feed
        if feed is None:
            return
        start = self.known_start()
        status = self.status()
        out = fm.run_head(self.run_id, start, status)
        progress = pg.train_progress(feed)
        out.append(
            f"  {progress.words() if status == 'running' else f'update {progress.done}' + (f'/{progress.planned}' if progress.planned else '')}"
        )
        elapsed = self.elapsed()
        if elapsed:
            out.append(f"  {elapsed}")
        if start.get("follows"):
            out.append_text(one_line(f"  follows {start['follows']}", style="dim", limit=40))
        remote = runs.remote_info(self.rdir)  # a run of a series on Ray: where it trains (or trained)
        if remote and remote.get("hostname"):
            where = f"  on node {remote['hostname']} ({str(remote.get('node_id', ''))[:12]})"
            out.append_text(one_line(where, style="dim", limit=60))
        out.append("\n")
        step = feed.last_step or {}
        if step:
            out.append("last update ", style="dim")
            out.append(clean_line(step_words(step), 300))
        else:
            out.append("no update yet", style="dim")
        reason = self.reason()
        if reason:
            out.append("\n")
            out.append("stop reason ", style="dim")
            out.append_text(
                one_line(reason, style="" if status == "completed" else sty.STATUS_STYLE.get(status, "bold"), limit=400)
            )
        elif status == "running":
            out.append("\nx stops it; quitting Cockpit leaves it running", style="dim")
        self.finish_head(out, status)

    def show_evals(self) -> None:
        feed = self.feed
        assert feed is not None
        table = self.query_one("#evals", CursorTable)
        names = list(dict.fromkeys(k for e in feed.evals for k in _metrics(e)))[:8]
        columns = ["step", "val_loss", *names]
        if columns != self._eval_columns:
            table.clear(columns=True)
            self._eval_shown = {}
            self._eval_columns = columns
            for i, col in enumerate(columns):
                table.add_column(one_line(short(col), limit=12), key=f"c{i}")
        best = min((loss for e in feed.evals for loss in [e.get("loss")] if _num(loss)), default=None)
        for e in feed.evals:
            loss = e.get("loss")
            cells = [
                one_line(e.get("step", "?"), limit=12),
                Text(
                    f"{loss:.4f}" if _num(loss) else "non-finite",
                    justify="right",
                    style=sty.BEST if loss is not None and loss == best else "",
                ),
            ]
            metrics = _metrics(e)
            for k in names:
                v = metrics.get(k)
                cells.append(Text(f"{v:.3g}" if _num(v) else "-", justify="right"))
            cells[0].justify = "right"
            put_row(
                table, self._eval_shown, clean_line(e.get("step"), 40), cells, [f"c{i}" for i in range(len(columns))]
            )
        every = ((feed.start or {}).get("validation") or {}).get("every_updates")
        table.border_title = Text(
            f"validation ({len(feed.evals)})" + (f" every {clean_line(every, 12)}" if every else "")
        )
        self.query_one("#train-metrics", TextBox).show(metrics_text(self.metrics))

    def show_loss(self) -> None:
        feed = self.feed
        assert feed is not None
        plot = self.query_one("#loss", BraillePlot)
        points = [
            (float(step), float(loss))
            for e in feed.evals
            for step, loss in [(e.get("step"), e.get("loss"))]
            if _num(step) and _num(loss)
        ]
        title = "loss"
        if feed.step_loss.y:
            title += f" {feed.step_loss.y[-1]:.3g}"
        if points:
            title += f"  val {points[-1][1]:.4g}"
        plot.title = title
        plot.set_data(
            [
                Line("train, per update", "magenta", feed.step_loss.t, feed.step_loss.y),
                Line("validation", "bright_cyan", [], [], points=points, marker="\u25cf"),
            ]
        )

    def action_gate(self) -> None:
        """A train run has no gates: Enter on a validation row does nothing more than show it."""

    def show_gates(self, feed: RunFeed) -> None:
        """A train run has no gates."""


def _metrics(e: Event) -> JSONObject:
    m = e.get("metrics")
    return m if isinstance(m, dict) else {}


def _num(x: object) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def short(name: str) -> str:
    return {"token_accuracy": "tok acc", "exact_match": "exact", "val_loss": "val_loss"}.get(name, name[:10])


def step_words(e: Event) -> str:
    parts = [f"{e.get('step', '?')}"]
    loss = e.get("loss")
    parts.append("loss " + (f"{loss:.4g}" if isinstance(loss, (int, float)) else "non-finite"))
    if isinstance(e.get("lr"), (int, float)):
        parts.append(f"lr {e['lr']:.3g}")
    gn = e.get("grad_norm")
    if "grad_norm" in e:
        parts.append("grad " + (f"{gn:.3g}" if isinstance(gn, (int, float)) else "non-finite"))
    if isinstance(e.get("duration_s"), (int, float)):
        parts.append(f"{e['duration_s']:.3f} s")
    return ", ".join(parts)


def metrics_text(m: JSONObject | None) -> Text:
    out = Text()
    if not m:
        out.append("metrics.json: written at the end", style="dim")
        return out
    fv, bv = m.get("final_val_loss"), m.get("best_val_loss")
    out.append("final ", style="bold")
    out.append(f"val {fv:.4g}" if isinstance(fv, (int, float)) else "no validation")
    if m.get("final_step") is not None:
        out.append(clean_line(f" @{m['final_step']}", 40))
    if isinstance(bv, (int, float)):
        out.append(clean_line(f", best {bv:.4g} @{m.get('best_step')}", 60))
    final = m.get("final_metrics")
    fm_ = final if isinstance(final, dict) else {}
    if fm_:
        out.append("\n")
        out.append(
            clean_line(
                ", ".join(
                    f"{short(k)} {v:.3g}" if isinstance(v, (int, float)) else f"{short(k)} -" for k, v in fm_.items()
                ),
                300,
            )
        )
    out.append("\n")
    out.append(clean_line(f"{m.get('updates', '?')}/{m.get('planned_updates', '?')} updates", 60))
    if isinstance(m.get("step_time_s"), (int, float)):
        out.append(f", {m['step_time_s']:.3f} s/update")
    peak = m.get("peak")
    value, counter = runs.mem_peak(peak if isinstance(peak, dict) else None)
    if value is not None:
        out.append(f"\npeak {fm.mib(value)} ({counter})", style="dim")
    return out
