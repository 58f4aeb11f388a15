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
import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Header, Log, Static

from ... import events as ev
from ... import runs
from .. import format as fm
from .. import style as sty
from ..api import app_of
from ..widgets.keyed import put_row
from ..widgets.plot import BraillePlot, Line
from .run import ATTACH_S, RunScreen, _mib_label


class TrainRunScreen(RunScreen):
    noun = "run"

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.metrics: dict[str, Any] | None = None
        self._eval_shown: dict[str, tuple[str, ...]] = {}
        self._eval_columns: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="run-head")
        with Horizontal(id="train-body"):
            with Vertical(id="train-side"):
                yield DataTable(id="evals", cursor_type="row", zebra_stripes=False)
                yield Static(id="train-metrics")
            with Vertical(id="charts"):
                yield BraillePlot("loss", zero_based=False, id="loss")
                yield BraillePlot("memory", fmt=_mib_label, id="mem")
        yield Log(id="log", max_lines=500, highlight=False)
        yield Footer()

    def attach(self) -> None:
        from ... import runs
        from ..ingest import RunFeed

        self.rdir = runs.run_dir(app_of(self).campaign_dir, self.run_id)
        self.feed = RunFeed(self.rdir / ev.EVENTS_FILE)
        self.sub_title = f"{app_of(self).notebook.campaign.name} / {self.run_id}"
        plot = self.query_one("#loss", BraillePlot)
        plot.x_fmt = lambda x: f"update {x:.0f}"
        plot.empty_text = "no update yet"
        table = self.query_one("#evals", DataTable)
        table.border_title = "validation"
        self.read_metrics()
        self.check_alive()
        self.tick(attach_s=ATTACH_S)
        self.set_interval(app_of(self).timing.events_s, self.tick)
        self.set_interval(1.0, self.check_alive)
        table.focus()

    # ---- reading

    def read_metrics(self) -> None:
        """metrics.json, written once at the run's end (small: read on the UI thread)."""
        try:
            self.metrics = json.loads((self.rdir / runs.METRICS_FILE).read_text())
        except (FileNotFoundError, ValueError, OSError):
            self.metrics = None

    def redraw(self, dirty: set[str], charts: set[str], behind: int) -> None:
        if "status" in dirty and self.feed is not None and self.feed.end is not None and self.metrics is None:
            self.read_metrics()
        if "evals" in dirty or "status" in dirty:
            self.show_evals()
        if "mem" in charts:
            self.show_memory()
        if "loss" in charts:
            self.show_loss()
        if "log" in dirty:
            self.show_log()
        self.show_head(behind)

    # ---- drawing

    def show_head(self, behind: int = 0) -> None:
        feed = self.feed
        if feed is None:
            return
        start = feed.start or {}
        status = self.status()
        out = fm.run_head(self.run_id, start, status)
        step = feed.last_step or {}
        planned = feed.planned_updates
        done = step.get("step", 0)
        out.append(f"  update {done}" + (f"/{planned}" if planned else ""))
        if feed.first_t is not None:
            end_t = feed.last_t if status != "running" else time.time()
            out.append(f"  {fm.duration((end_t or feed.first_t) - feed.first_t)}")
        if start.get("follows"):
            out.append(f"  follows {start['follows']}", style="dim")
        out.append("\n")
        if step:
            out.append("last update ", style="dim")
            out.append(step_words(step))
        else:
            out.append("no update yet", style="dim")
        reason = self.crash_reason(status, feed.phase)
        if reason:
            out.append("\n")
            out.append("stop reason ", style="dim")
            out.append(reason, style="" if status == "completed" else "bold red")
        elif status == "running":
            out.append("\nx stops it; quitting Cockpit leaves it running", style="dim")
        self.finish_head(out, status, behind)

    def show_evals(self) -> None:
        feed = self.feed
        assert feed is not None
        table = self.query_one("#evals", DataTable)
        names = list(dict.fromkeys(k for e in feed.evals for k in (e.get("metrics") or {})))
        columns = ["step", "val_loss", *names]
        if columns != self._eval_columns:
            table.clear(columns=True)
            self._eval_shown = {}
            self._eval_columns = columns
            for col in columns:
                table.add_column(short(col), key=col)
        best = min((e["loss"] for e in feed.evals if isinstance(e.get("loss"), (int, float))), default=None)
        for e in feed.evals:
            loss = e.get("loss")
            cells = [
                Text(str(e.get("step", "?")), justify="right"),
                Text(
                    f"{loss:.4f}" if isinstance(loss, (int, float)) else "non-finite",
                    justify="right",
                    style=sty.BEST if loss is not None and loss == best else "",
                ),
            ]
            for k in names:
                v = (e.get("metrics") or {}).get(k)
                cells.append(Text(f"{v:.3g}" if isinstance(v, (int, float)) else "-", justify="right"))
            put_row(table, self._eval_shown, str(e.get("step")), cells, columns)
        every = ((feed.start or {}).get("validation") or {}).get("every_updates")
        table.border_title = f"validation ({len(feed.evals)})" + (f" every {every}" if every else "")
        self.query_one("#train-metrics", Static).update(metrics_text(self.metrics))

    def show_loss(self) -> None:
        feed = self.feed
        assert feed is not None
        plot = self.query_one("#loss", BraillePlot)
        points = [
            (float(e["step"]), float(e["loss"]))
            for e in feed.evals
            if isinstance(e.get("step"), (int, float)) and isinstance(e.get("loss"), (int, float))
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

    def action_data(self) -> None:
        app_of(self).open_data(self.run_id)


def short(name: str) -> str:
    return {"token_accuracy": "tok acc", "exact_match": "exact", "val_loss": "val_loss"}.get(name, name[:10])


def step_words(e: dict[str, Any]) -> str:
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


def metrics_text(m: dict[str, Any] | None) -> Text:
    out = Text()
    if not m:
        out.append("metrics.json: written at the end", style="dim")
        return out
    fv, bv = m.get("final_val_loss"), m.get("best_val_loss")
    out.append("final ", style="bold")
    out.append(f"val {fv:.4g}" if isinstance(fv, (int, float)) else "no validation")
    if m.get("final_step") is not None:
        out.append(f" @{m['final_step']}")
    if isinstance(bv, (int, float)):
        out.append(f", best {bv:.4g} @{m.get('best_step')}")
    fm_ = m.get("final_metrics") or {}
    if fm_:
        out.append("\n")
        out.append(
            ", ".join(f"{short(k)} {v:.3g}" if isinstance(v, (int, float)) else f"{short(k)} -" for k, v in fm_.items())
        )
    out.append("\n")
    out.append(f"{m.get('updates', '?')}/{m.get('planned_updates', '?')} updates")
    if isinstance(m.get("step_time_s"), (int, float)):
        out.append(f", {m['step_time_s']:.3f} s/update")
    value, counter = runs.mem_peak(m.get("peak") if isinstance(m.get("peak"), dict) else None)
    if value is not None:
        out.append(f"\npeak {fm.mib(value)} ({counter})", style="dim")
    return out
