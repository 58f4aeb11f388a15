"""A braille line chart with a y scale, a legend and labelled vertical marks.

Plain Unicode, so it reads the same over any SSH terminal: each cell holds a
2x4 braille dot grid. Several series share the axes; vertical marks (phase
boundaries) are drawn as dim rules with their labels under the chart.
Points are bucketed per dot column (keeping the maximum, so peaks survive)
and joined by straight lines across columns without a point, so drawing costs
O(points + cells) however long the run. A line may also carry
points drawn as a marker character (validation points, one marker per run when
several runs are overlaid), so runs stay apart on a terminal without colour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))


@dataclass
class Line:
    label: str
    style: str
    t: Sequence[float]
    y: Sequence[float]
    points: Sequence[tuple[float, float]] = ()  # (x, y) drawn as ``marker`` over the braille line
    marker: str = ""


@dataclass
class Mark:
    t: float
    label: str


class BraillePlot(Widget):
    DEFAULT_CSS = """
    BraillePlot { height: 1fr; min-height: 4; text-wrap: nowrap; text-overflow: clip; }
    """

    def __init__(
        self,
        title: str = "",
        fmt: Callable[[float], str] = lambda v: f"{v:.3g}",
        zero_based: bool = True,
        *,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.title = title
        self.fmt = fmt
        self.zero_based = zero_based
        self.lines: list[Line] = []
        self.marks: list[Mark] = []
        self.y_max: float | None = None  # e.g. a GPU's capacity; None: from the data
        self.empty_text = "no data yet"
        self.legend = True  # False: the caller shows its own legend (many overlaid runs)
        self.x_fmt: Callable[[float], str] | None = None  # x labels on the bottom row when there are no marks

    def set_data(self, lines: list[Line], marks: list[Mark] | None = None, y_max: float | None = None) -> None:
        self.lines = [ln for ln in lines if len(ln.t) or len(ln.points)]
        self.marks = marks or []
        self.y_max = y_max
        self.refresh()

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        return render_plot(
            self.lines,
            self.marks,
            width,
            height,
            self.title,
            self.fmt,
            self.zero_based,
            self.y_max,
            self.empty_text,
            legend=self.legend,
            x_fmt=self.x_fmt,
        )


def render_plot(
    lines: list[Line],
    marks: list[Mark],
    width: int,
    height: int,
    title: str = "",
    fmt: Callable[[float], str] = lambda v: f"{v:.3g}",
    zero_based: bool = True,
    y_max: float | None = None,
    empty_text: str = "no data yet",
    *,
    legend: bool = True,
    x_fmt: Callable[[float], str] | None = None,
) -> Text:
    out = Text(no_wrap=True, overflow="crop")
    head = Text(title, style="bold")
    if legend:
        for ln in lines:
            head.append("  ")
            head.append(f"{ln.marker or chr(0x28FF)} ", style=ln.style)
            head.append(ln.label)
    out.append_text(head)
    if not lines or width < 12 or height < 3:
        if height >= 2:
            out.append("\n")
            out.append(empty_text, style="dim")
        return out
    xs = [x for ln in lines if len(ln.t) for x in (ln.t[0], ln.t[-1])] + [p[0] for ln in lines for p in ln.points]
    t0, t1 = min(xs), max(xs)
    if t1 <= t0:
        t1 = t0 + 1.0
    ys = [max(ln.y) for ln in lines if len(ln.y)] + [p[1] for ln in lines for p in ln.points]
    top = max(ys) if y_max is None else y_max
    lows = [min(ln.y) for ln in lines if len(ln.y)] + [p[1] for ln in lines for p in ln.points]
    bottom = 0.0 if zero_based else min(lows)
    if top <= bottom:
        top = bottom + (abs(bottom) or 1.0)
    top_label, bottom_label = fmt(top), fmt(bottom)
    gutter = max(len(top_label), len(bottom_label)) + 1
    cols = width - gutter
    rows = height - 2  # legend above, phase labels below
    dots_x, dots_y = cols * 2, rows * 4
    cells = [[0] * cols for _ in range(rows)]
    owner: list[list[int]] = [[-1] * cols for _ in range(rows)]
    span = t1 - t0
    yspan = top - bottom

    for si, ln in enumerate(lines):
        column_max: list[float | None] = [None] * dots_x
        for t, y in zip(ln.t, ln.y, strict=True):
            x = int((t - t0) / span * (dots_x - 1))
            cur = column_max[x]
            if cur is None or y > cur:
                column_max[x] = y

        def run(x: int, a: int, b: int, si: int = si) -> None:
            for d in range(min(a, b), max(a, b) + 1):
                r, c = d // 4, x // 2
                cells[r][c] |= _BITS[x % 2][d % 4]
                owner[r][c] = si

        prev: int | None = None
        prev_x = 0
        for x, value in enumerate(column_max):
            if value is None:
                continue
            y = value
            dy = int(round((min(max(y, bottom), top) - bottom) / yspan * (dots_y - 1)))
            dy = dots_y - 1 - dy  # row 0 is the top
            if prev is None:
                run(x, dy, dy)
            else:
                # Columns without a point (sparse data) get the straight line between their neighbours;
                # each column joins the previous one by a vertical run, so the line has no gaps.
                last = prev
                for gx in range(prev_x + 1, x):
                    gy = int(round(prev + (dy - prev) * (gx - prev_x) / (x - prev_x)))
                    run(gx, last, gy)
                    last = gy
                run(x, last, dy)
            prev, prev_x = dy, x

    # Marker points over the lines, each in its line's style (the last line drawn wins a shared cell).
    points: dict[tuple[int, int], tuple[str, int]] = {}
    for si, ln in enumerate(lines):
        if not ln.marker:
            continue
        for px, py in ln.points:
            if py > top or py < bottom:
                continue  # a point outside a fixed scale is not drawn at the edge as if it were there
            x = int((px - t0) / span * (dots_x - 1))
            dy = dots_y - 1 - int(round((py - bottom) / yspan * (dots_y - 1)))
            points[(dy // 4, x // 2)] = (ln.marker, si)

    mark_cols: dict[int, str] = {}
    for m in marks:
        if t0 <= m.t <= t1:
            c = int((m.t - t0) / span * (dots_x - 1)) // 2
            mark_cols.setdefault(c, m.label)

    for r in range(rows):
        out.append("\n")
        if r == 0:
            label = top_label
        elif r == rows - 1:
            label = bottom_label
        else:
            label = ""
        out.append(label.rjust(gutter - 1) + "\u2502", style="dim")
        row = cells[r]
        for c in range(cols):
            bits = row[c]
            if (r, c) in points:
                marker, si = points[(r, c)]
                out.append(marker, style=f"bold {lines[si].style}")
            elif bits:
                out.append(chr(0x2800 + bits), style=lines[owner[r][c]].style)
            elif c in mark_cols:
                out.append("\u250a", style="dim")
            else:
                out.append(" ")
    # Phase labels: each at its mark's column when it fits, else left out.
    axis = [" "] * cols
    free_from = 0
    for c in sorted(mark_cols):
        label = mark_cols[c]
        if c < free_from or c >= cols:
            continue
        room = cols - c
        text = label[: max(1, min(len(label), room))]
        for i, ch in enumerate(text):
            axis[c + i] = ch
        free_from = c + len(text) + 1
    if not mark_cols and x_fmt is not None:
        left, right = x_fmt(t0), x_fmt(t1)
        if len(left) + len(right) + 1 <= cols:
            axis = list(left + " " * (cols - len(left) - len(right)) + right)
    out.append("\n")
    out.append(" " * gutter + "".join(axis), style="dim")
    return out
