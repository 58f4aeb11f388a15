"""The gate table: one row per planned phase, filled as gates arrive.

Rows are keyed by phase and updated cell by cell (only cells whose text
changed), never cleared, so the cursor stays where the user put it while a
pilot writes. The last column draws each phase's peak memory as a bar against
the GPU's capacity (or, without a GPU, against the largest phase's RSS); the
phase that sets the run's peak is drawn in its own colour and marked.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from .. import format as fm
from .. import style as sty
from ..ingest import RunFeed
from .keyed import put_row

BAR_WIDTH = 8
COLUMNS = (
    ("phase", "phase", 13),
    ("result", "result", 7),
    ("time", "secs", 5),
    ("peak", "MiB", 6),
    ("bar", "peak", BAR_WIDTH + 1),
)


class GateTable(DataTable):
    DEFAULT_CSS = """
    GateTable { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=False)
        self._shown: dict[str, tuple[str, ...]] = {}
        self.scale_label = ""

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def show(self, feed: RunFeed) -> None:
        peaks = {p: feed.phase_peak(p)[0] for p in feed.phases}
        capacity = max(feed.capacity.values()) if feed.capacity else None
        measured = [v for v in peaks.values() if v is not None]
        top = max(measured) if measured else None
        # the first phase reaching the top sets the peak; later ties do not
        top_phase = next((p for p in feed.phases if top is not None and peaks.get(p) == top), None)
        scale: float | None
        if capacity:
            scale, label = (
                capacity,
                f"vs {capacity / 2**30:.0f}G" if capacity >= 10 * 2**30 else f"vs {fm.mib(capacity, unit=False)}M",
            )
            self.scale_label = f"bars: peak vs GPU {fm.size(capacity)}"
        else:
            scale, label = top, "vs top"
            self.scale_label = "bars: RSS vs largest, no GPU"
        column = self.columns.get(ColumnKey("bar"))
        if column is not None and column.label.plain != label:
            column.label = Text(label)
            self.refresh()
        running = None if feed.end else feed.phase
        for phase in feed.phases:
            gate = feed.gates.get(phase)
            peak = peaks.get(phase)
            is_top = phase == top_phase
            if gate is not None:
                verdict = sty.verdict_text(gate.get("verdict"))
                secs = gate.get("duration_s")
                time_text = Text(f"{secs:.2f}" if isinstance(secs, (int, float)) else "-")
            elif phase == running:
                verdict, time_text = Text("running", style=sty.RUNNING), Text("...", style="cyan")
            elif feed.end is not None and phase == (feed.end.get("phase") or feed.phase):
                verdict, time_text = Text(feed.end.get("status", "ended"), style="bold red"), Text("-")
            else:
                verdict, time_text = Text("...", style="dim"), Text("")
            peak_text = Text(fm.mib(peak, unit=False) if peak is not None else "", style="bold" if is_top else "")
            bar = fm.bar(peak, scale, BAR_WIDTH, style=sty.PEAK if is_top else "green")
            bar.append("\u25c0" if is_top else " ", style=sty.PEAK)
            cells = (Text(phase), verdict, time_text, peak_text, bar)
            self._put(phase, cells)

    def _put(self, phase: str, cells: tuple[Text, ...]) -> None:
        put_row(self, self._shown, phase, cells, [key for key, _, _ in COLUMNS])
