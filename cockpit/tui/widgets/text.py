"""A Static that redraws only when what it shows changed, and lays out only when its height may change.

``Static.update`` repaints and lays out the whole screen by default; a header
rewritten at every tick with the same text (or with a counter that changed in
place) would cost a full-screen render each time. A :class:`TextBox` shown an
unchanged text does nothing, and one whose text wraps to the same number of
lines at its width repaints only itself.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class TextBox(Static):
    def __init__(self, text: Text | str = "", *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(text, id=id, classes=classes, markup=False)
        self._shown: tuple[str, int] | None = None  # (markup shown, wrapped line count)

    def show(self, text: Text) -> None:
        markup = text.markup
        if self._shown is not None and self._shown[0] == markup:
            return
        width = self.content_region.width
        lines = len(text.wrap(self.app.console, width)) if width > 0 else -1
        layout = self._shown is None or lines < 0 or self._shown[1] != lines
        self._shown = (markup, lines)
        self.update(text, layout=layout)
