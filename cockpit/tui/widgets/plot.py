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

import bisect
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from ..plain import clean_line

_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))


@dataclass
class Line:
    label: str
    style: str
    t: Sequence[float]
    y: Sequence[float]
    points: Sequence[tuple[float, float]] = ()  # (x, y) drawn as ``marker`` over the braille line
    marker: str = ""
    # A band (e.g. min..max over seeds) drawn dim under the line: lo[i]..hi[i] at t[i].
    lo: Sequence[float] = ()
    hi: Sequence[float] = ()


@dataclass
class Mark:
    t: float
    label: str


class BraillePlot(Widget):
    DEFAULT_CSS = """
    BraillePlot { height: 1fr; min-height: 4; text-wrap: nowrap; text-overflow: clip; }
    BraillePlot:focus { background: $boost; }
    """
    ALLOW_MAXIMIZE = True
    can_focus = True  # so m can maximise it

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
        self.log_y = False
        self._strips: list[Strip] | None = None  # the rows drawn for _strips_key
        self._strips_key: tuple[object, ...] = ()

    def set_data(self, lines: list[Line], marks: list[Mark] | None = None, y_max: float | None = None) -> None:
        self.lines = [ln for ln in lines if len(ln.t) or len(ln.points)]
        self.marks = marks or []
        self.y_max = y_max
        self._strips = None
        self.refresh()

    def render_line(self, y: int) -> Strip:
        """The chart's row ``y`` (Textual's line API): the rows are drawn once per data, size and style.

        A live chart is redrawn every second; its rows become the screen's segments directly (a few
        runs of one style a row), at a fraction of what Textual's general text rendering costs. The
        widget's style is read once a redraw (at row 0, which every full redraw asks for first).
        """
        width, height = self.size
        if self._strips is None or y == 0 or self._strips_key[:2] != (width, height):
            base = self.rich_style
            key = (width, height, base, self.title, self.log_y, self.legend, self.empty_text)
            if self._strips is None or key != self._strips_key:
                rows = self.render().split("\n", allow_blank=True)[:height]
                self._strips = [_strip(row, width, base, self.app.console) for row in rows]
                self._strips += [Strip.blank(width, base)] * (height - len(rows))  # every row drawn
                self._strips_key = key
        return self._strips[y] if y < len(self._strips) else Strip.blank(width)

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
            log_y=self.log_y,
        )


def _column_max(ts: Sequence[float], ys: Sequence[float], t0: float, span: float, dots_x: int) -> list[float | None]:
    """Each dot column's largest value (None where no point falls), for points in x order.

    The hot part of a redraw: each point's column by ``col()``'s arithmetic in a comprehension,
    then the maximum of each column's slice, so there is a Python step per column, not per point.
    """
    column_max: list[float | None] = [None] * dots_x
    last_x = dots_x - 1
    cols_of = [int((t - t0) / span * last_x) for t in ts]
    values = list(ys)
    i, n = 0, len(cols_of)
    while i < n:
        xi = cols_of[i]
        j = bisect.bisect_right(cols_of, xi, i)
        top_y: float = max(values[i:j]) if j - i > 1 else values[i]
        x = 0 if xi < 0 else last_x if xi > last_x else xi
        cur = column_max[x]
        if cur is None or top_y > cur:
            column_max[x] = top_y
        i = j
    return column_max


def _strip(row: Text, width: int, base: Style, console: Console) -> Strip:
    """A chart row as a Strip of ``width`` cells: one segment per styled run, on the widget's style."""
    spans = row.spans
    if any(a.end > b.start for a, b in zip(spans, spans[1:], strict=False)):  # not runs: Rich sorts it out
        return Strip(list(row.render(console)), row.cell_len).crop_extend(0, width, base).apply_style(base)
    plain, pos = row.plain, 0
    segments: list[Segment] = []
    for span in spans:
        if span.start > pos:
            segments.append(Segment(plain[pos : span.start], base))
        style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
        segments.append(Segment(plain[span.start : span.end], base + style))
        pos = span.end
    if pos < len(plain):
        segments.append(Segment(plain[pos:], base))
    return Strip(segments, row.cell_len).crop_extend(0, width, base)


def _clean(t: Sequence[float], y: Sequence[float]) -> bool:
    """Finite values with x never decreasing (and as many x as y)."""
    return (
        len(t) == len(y)
        and all(map(math.isfinite, t))
        and all(map(math.isfinite, y))
        and all(map(operator.le, t, itertools.islice(t, 1, None)))
    )


def _usable(y: float, log_y: bool) -> bool:
    return math.isfinite(y) and (not log_y or y > 0)


def _ready(ln: Line, log_y: bool) -> Line:
    """The line's finite values, sorted by x (a wall clock that stepped back must not break the chart),
    on a log scale when asked; values a log scale cannot show are left out."""
    band = len(ln.lo) == len(ln.t) and len(ln.hi) == len(ln.t)
    if not log_y and not band and _clean(ln.t, ln.y) and all(map(math.isfinite, (p for pt in ln.points for p in pt))):
        return ln  # the usual case, checked at C speed: finite and in order already
    conv: Callable[[float], float] = math.log10 if log_y else float
    rows = []
    for i, (t, y) in enumerate(zip(ln.t, ln.y, strict=False)):
        if not (math.isfinite(t) and _usable(y, log_y)):
            continue
        if band:
            lo, hi = ln.lo[i], ln.hi[i]
            if not (_usable(lo, log_y) and _usable(hi, log_y)):
                lo = hi = y
            rows.append((t, conv(y), conv(lo), conv(hi)))
        else:
            rows.append((t, conv(y), 0.0, 0.0))
    if any(rows[i][0] > rows[i + 1][0] for i in range(len(rows) - 1)):
        rows.sort(key=lambda r: r[0])
    points = [(x, conv(y)) for x, y in ln.points if math.isfinite(x) and _usable(y, log_y)]
    return Line(
        ln.label,
        ln.style,
        [r[0] for r in rows],
        [r[1] for r in rows],
        points=points,
        marker=ln.marker,
        lo=[r[2] for r in rows] if band else (),
        hi=[r[3] for r in rows] if band else (),
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
    log_y: bool = False,
) -> Text:
    out = Text(no_wrap=True, overflow="crop")
    head = Text()
    head.append(clean_line(title, 200), style="bold")
    if legend:
        for ln in lines:
            head.append("  ")
            head.append(f"{ln.marker or chr(0x28FF)} ", style=ln.style)
            head.append(clean_line(ln.label, 80))
    out.append_text(head)
    lines = [r for r in (_ready(ln, log_y) for ln in lines) if len(r.t) or len(r.points)]
    if log_y and y_max is not None:
        y_max = math.log10(y_max) if y_max > 0 and math.isfinite(y_max) else None
    label: Callable[[float], str] = (lambda v: fmt(10**v)) if log_y else fmt
    if not lines or width < 12 or height < 3:
        if height >= 2:
            out.append("\n")
            out.append(empty_text, style="dim")
        return out
    xs = [x for ln in lines if len(ln.t) for x in (ln.t[0], ln.t[-1])] + [p[0] for ln in lines for p in ln.points]
    t0, t1 = min(xs), max(xs)
    if t1 <= t0:
        t1 = t0 + 1.0
    ys = [max(ln.y) for ln in lines if len(ln.y)] + [max(ln.hi) for ln in lines if len(ln.hi)]
    ys += [p[1] for ln in lines for p in ln.points]
    top = max(ys) if y_max is None else y_max
    lows = [min(ln.y) for ln in lines if len(ln.y)] + [min(ln.lo) for ln in lines if len(ln.lo)]
    lows += [p[1] for ln in lines for p in ln.points]
    bottom = 0.0 if zero_based and not log_y else min(lows)
    if top <= bottom:
        top = bottom + (abs(bottom) or 1.0)
    top_label, bottom_label = label(top), label(bottom)
    gutter = max(len(top_label), len(bottom_label)) + 1
    cols = width - gutter
    rows = height - 2  # legend above, phase labels below
    if cols < 2 or rows < 1:
        return out
    dots_x, dots_y = cols * 2, rows * 4
    cells = [[0] * cols for _ in range(rows)]
    owner: list[list[int]] = [[-1] * cols for _ in range(rows)]
    shade = [[0] * cols for _ in range(rows)]  # band dots, under the lines
    shade_owner: list[list[int]] = [[-1] * cols for _ in range(rows)]
    span = t1 - t0
    yspan = top - bottom

    def col(t: float) -> int:
        return min(dots_x - 1, max(0, int((t - t0) / span * (dots_x - 1))))

    def row(y: float) -> int:
        dy = int(round((min(max(y, bottom), top) - bottom) / yspan * (dots_y - 1)))
        return dots_y - 1 - dy  # row 0 is the top

    for si, ln in enumerate(lines):
        if len(ln.lo):
            band_lo: list[float | None] = [None] * dots_x
            band_hi: list[float | None] = [None] * dots_x
            for t, lo, hi in zip(ln.t, ln.lo, ln.hi, strict=True):
                x = col(t)
                cur_lo, cur_hi = band_lo[x], band_hi[x]
                band_lo[x] = lo if cur_lo is None else min(cur_lo, lo)
                band_hi[x] = hi if cur_hi is None else max(cur_hi, hi)
            for x in range(dots_x):
                lo_v, hi_v = band_lo[x], band_hi[x]
                if lo_v is None or hi_v is None:
                    continue
                for d in range(row(hi_v), row(lo_v) + 1):
                    r, c = d // 4, x // 2
                    shade[r][c] |= _BITS[x % 2][d % 4]
                    shade_owner[r][c] = si

        column_max = _column_max(ln.t, ln.y, t0, span, dots_x)

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
            dy = row(value)
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
            points[(row(py) // 4, col(px) // 2)] = (ln.marker, si)

    mark_cols: dict[int, str] = {}
    for m in marks:
        if math.isfinite(m.t) and t0 <= m.t <= t1:
            mark_cols.setdefault(col(m.t) // 2, clean_line(m.label, 40))

    for r in range(rows):
        out.append("\n")
        if r == 0:
            axis_label = top_label
        elif r == rows - 1:
            axis_label = bottom_label
        else:
            axis_label = ""
        out.append(axis_label.rjust(gutter - 1) + "\u2502", style="dim")
        line_row, shade_row = cells[r], shade[r]
        # Cells of one style are appended as one run: a few spans a row instead of one a cell, which is
        # what the terminal's renderer pays for (a chart redrawn every second).
        run_chars: list[str] = []
        run_style = ""
        for c in range(cols):
            bits = line_row[c]
            if (r, c) in points:
                marker, si = points[(r, c)]
                ch, st = marker, f"bold {lines[si].style}"
            elif bits:
                ch, st = chr(0x2800 + bits), lines[owner[r][c]].style
            elif shade_row[c]:
                ch, st = chr(0x2800 + shade_row[c]), f"dim {lines[shade_owner[r][c]].style}"
            elif c in mark_cols:
                ch, st = "\u250a", "dim"
            else:
                ch, st = " ", run_style  # a blank looks the same in any foreground style: it joins the run
            if st != run_style and run_chars:
                out.append("".join(run_chars), style=run_style or None)
                run_chars = []
            run_style = st
            run_chars.append(ch)
        if run_chars:
            out.append("".join(run_chars), style=run_style or None)
    # Phase labels: each at its mark's column when it fits, else left out.
    axis = [" "] * cols
    free_from = 0
    for c in sorted(mark_cols):
        text_label = mark_cols[c]
        if c < free_from or c >= cols:
            continue
        room = cols - c
        text = text_label[: max(1, min(len(text_label), room))]
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
