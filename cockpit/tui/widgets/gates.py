"""The gate table: one row per planned phase, filled as gates arrive.

Rows are keyed by phase and updated cell by cell (only cells whose text
changed), never cleared, so the cursor stays where the user put it while a
pilot writes. The running phase shows how long it has been running. The last
column draws each phase's peak memory as a bar against the GPU's capacity (or,
without a GPU, against the largest phase's RSS); the phase that sets the
run's peak is drawn in its own colour and marked. A phase a person stopped
reads "stopped", not a failure.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from rich.text import Text
from textual.widgets.data_table import ColumnKey

from .. import format as fm
from .. import style as sty
from ..ingest import RunFeed
from ..plain import one_line
from .keyed import put_row
from .table import CursorTable

BAR_WIDTH = 8
COLUMNS = (
    ("phase", "phase", 13),
    ("result", "result", 7),
    ("time", "secs", 5),
    ("peak", "MiB", 6),
    ("bar", "peak", BAR_WIDTH + 1),
)


class GateTable(CursorTable):
    DEFAULT_CSS = """
    GateTable { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, zebra_stripes=False)
        self._shown: dict[str, tuple[Hashable, ...]] = {}
        self.scale_label = ""
        self._followed: str | None = None  # the running phase last brought into view

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)
        self.watch(self, "scroll_y", self.say_hidden, init=False)

    def on_resize(self) -> None:
        self.say_hidden()

    def hidden(self) -> tuple[int, int]:
        """Rows scrolled out of view above and below (a pilot has 14 phases; 80x24 shows 9 of them)."""
        header = self.header_height if self.show_header else 0
        seen = max(0, self.scrollable_content_region.height - header)
        if not seen:
            return 0, 0
        above = min(int(self.scroll_y), self.row_count)
        return above, max(0, self.row_count - above - seen)

    def keep_in_view(self, phase: str) -> None:
        """Scroll the running phase's row into view once, when it starts (at 80x24 the last 5 phases ran unseen);
        the user may scroll away until the next phase starts."""
        try:
            index = self.get_row_index(phase)
        except Exception:  # noqa: BLE001 - RowDoesNotExist: the rows are being filled
            return
        header = self.header_height if self.show_header else 0
        seen = max(1, self.scrollable_content_region.height - header)
        if not int(self.scroll_y) <= index < int(self.scroll_y) + seen:
            self.scroll_to(y=max(0, index - seen + 1), animate=False)

    def say_hidden(self) -> None:
        """The phase column's header says how many rows are out of view and where: "phase ↑2 ↓3"."""
        above, below = self.hidden()
        label = "phase" + (f" \u2191{above}" if above else "") + (f" \u2193{below}" if below else "")
        if below and not above:
            label = f"phase \u2193{below} more"
        column = self.columns.get(ColumnKey("phase"))
        if column is not None and column.label.plain != label:
            column.label = Text(label, style="bold" if above or below else "")
            self.notify_style_update()  # the public way to drop DataTable's cached header and refresh

    def show(self, feed: RunFeed, now: float | None = None, status: str = "running") -> None:
        """Fill the rows from the run's reader; ``status`` is the run's (the phase a crash ended in says so)."""
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
        running = status in ("running", "reading")
        running_phase = None if feed.end or not running else feed.phase
        ended_phase = (feed.end or {}).get("phase") or feed.phase
        for phase in feed.phases:
            gate = feed.gates.get(phase)
            peak = peaks.get(phase)
            is_top = phase == top_phase
            if gate is not None:
                view = sty.gate_view(gate, feed.end)
                verdict = Text(view.word, style=view.style)
                secs = gate.get("duration_s")
                time_text = Text(f"{secs:.2f}" if isinstance(secs, (int, float)) else "-")
                if gate.get("busy"):  # timed while other processes kept the CPUs busy (Enter says how busy)
                    time_text.append("*", style="yellow")
            elif phase == running_phase:
                started = feed.phase_started(phase)
                verdict = Text("running", style=sty.RUNNING)
                elapsed = max(0.0, (now or time.time()) - started) if started is not None else None
                time_text = Text(_short(elapsed) if elapsed is not None else "...", style="cyan")
            elif not running and phase == ended_phase:
                ended = str((feed.end or {}).get("status") or status)
                verdict, time_text = sty.status_text(ended), Text("-")
            else:
                verdict, time_text = Text("...", style=sty.PENDING), Text("")
            peak_text = Text(fm.mib(peak, unit=False) if peak is not None else "", style="bold" if is_top else "")
            bar = fm.bar(peak, scale, BAR_WIDTH, style=sty.PEAK if is_top else "green")
            bar.append("\u25c0" if is_top else " ", style=sty.PEAK)
            cells = (one_line(phase, limit=40), verdict, time_text, peak_text, bar)
            self._put(phase, cells)
        if running_phase is not None and running_phase != self._followed:
            self._followed = running_phase
            self.call_after_refresh(self.keep_in_view, running_phase)
        self.call_after_refresh(self.say_hidden)

    def _put(self, phase: str, cells: tuple[Text, ...]) -> None:
        put_row(self, self._shown, phase, cells, [key for key, _, _ in COLUMNS])


def _short(seconds: float) -> str:
    """Elapsed time in at most 5 characters (the secs column)."""
    if seconds < 100:
        return f"{seconds:.1f}"
    if seconds < 6000:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"
