"""The newest lines of a run's log, appended without laying the screen out again.

Textual's ``Log`` sets its virtual size on every write, and a virtual size is a
layout reactive: each line a running pilot logs laid out the whole run screen
(about a third of that screen's idle CPU) until the log held ``max_lines``.
:class:`TailLog` always shows its scrollbars (``overflow: scroll``, as ``Log``
does), so a new line can never change its region: it sets its virtual size
without a layout and moves the scrollbars itself. It draws through the line
API, one cached strip per line, and only what moved is refreshed: the whole
widget when the view follows the end (every line shifts), the new lines alone
when they land inside a short log, nothing but the scrollbars when the reader
is scrolled up and they land below the window.

Lines are taken as given (the caller cleans them: ``plain.clean_line``); they
are never markup. When old lines are dropped past ``max_lines`` a reader who
scrolled up keeps the same text in view.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.selection import Selection
from textual.strip import Strip
from textual.widget import Widget


class TailLog(ScrollView, can_focus=True):
    """A scrolling log of plain lines, at most ``max_lines``, that follows its end while shown there."""

    ALLOW_SELECT = True

    DEFAULT_CSS = """
    TailLog {
        background: $surface;
        color: $text;
        overflow: scroll;
        &:focus {
            background-tint: $foreground 5%;
        }
    }
    """

    def __init__(self, max_lines: int = 500, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = max_lines
        self._lines: list[str] = []
        self._width = 0  # the widest line, in cells
        self._strips: LRUCache[tuple[int, int, int], Strip] = LRUCache(256)  # (line's serial, x, width)
        self._first_serial = 0  # the serial number of _lines[0]: a line keeps its number while older ones go

    @property
    def lines(self) -> list[str]:
        """The lines held now, oldest first (a copy)."""
        return list(self._lines)

    @property
    def at_end(self) -> bool:
        """Whether the view shows the last line (a new line then keeps it in view)."""
        return self.scroll_offset.y >= self.max_scroll_y

    def write_lines(self, lines: Iterable[str], follow: bool | None = None) -> None:
        """Append ``lines``; ``follow`` (default: whether the view is at the end now) scrolls to show them."""
        new = list(lines)
        if not new:
            return
        if follow is None:
            follow = self.at_end
        start = len(self._lines)
        self._lines.extend(new)
        self._width = max(self._width, *(cell_len(line) for line in new))
        dropped = max(0, len(self._lines) - self.max_lines)
        if dropped:
            del self._lines[:dropped]
            self._first_serial += dropped
        self._set_extent()
        if dropped and not follow:  # the reader's text moved up by what went: scroll with it
            self.scroll_to(y=max(0, self.scroll_offset.y - dropped), animate=False, immediate=True)
        if follow:
            self._to_end()
            self.call_after_refresh(self._to_end)  # again once laid out: a log not yet sized has no true end
        if dropped:
            self.refresh()  # every line moved in the list (a scroll's repaint may or may not have happened)
        else:
            self.refresh_lines(start, len(new))  # in view only in a log shorter than its window

    def _to_end(self) -> None:
        if self.scroll_offset.y != self.max_scroll_y:  # a move repaints the log (scroll_y's watcher)
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def _set_extent(self) -> None:
        """The virtual size, without the layout its reactive asks for: the scrollbars are always shown, so the
        region cannot change; they are told the new extent here instead."""
        size = Size(self._width, len(self._lines))
        self.set_reactive(Widget.virtual_size, size)
        if self.is_mounted:
            self.vertical_scrollbar.window_virtual_size = size.height
            self.horizontal_scrollbar.window_virtual_size = size.width

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    # ---- text selection, as Log has it (the mouse selects, ctrl+c copies)

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        return selection.extract("\n".join(self._lines)), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self._strips.clear()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        style = self.rich_style
        if not 0 <= index < len(self._lines):
            return Strip.blank(width, style)
        key = (self._first_serial + index, scroll_x, width)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strip(index, style).crop_extend(scroll_x, scroll_x + width, style)
            strip = strip.apply_offsets(scroll_x, index)  # where the mouse is, for selecting
            self._strips[key] = strip
        return strip

    def _strip(self, index: int, style: Style) -> Strip:
        line = self._lines[index]
        selection = self.text_selection
        span = selection.get_span(index) if selection is not None else None
        if span is None:
            return Strip([Segment(line, style)], cell_len(line))
        start, end = span
        text = Text(line, style=style, no_wrap=True)
        text.stylize(self.screen.get_component_rich_style("screen--selection"), start, len(line) if end == -1 else end)
        return Strip(text.render(self.app.console), cell_len(line))
