"""A SelectionList whose boxes say their state in text, not in colour alone: ``[x]`` chosen, ``[ ]`` not.

Textual draws every box with the same X and tells chosen from unchosen only by its colour, which a
monochrome terminal, a colour-blind user or a screen reader loses. The house rule: colours carry meaning,
text says it too.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import SelectionList
from textual.widgets.option_list import OptionDoesNotExist

T = TypeVar("T")

CHOSEN, UNCHOSEN = "[x]", "[ ]"  # as wide as Textual's box (left side, X, right side), so the layout is unchanged


class CheckList(SelectionList[T], Generic[T]):
    """SelectionList with ``[x]`` / ``[ ]`` boxes; everything else (keys, messages, styles) is SelectionList's."""

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        try:
            option = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return strip
        segments = list(strip)
        if len(segments) < 3:
            return strip
        word = CHOSEN if option.value in self.selected else UNCHOSEN
        # The box is the first three segments (its two sides and its middle); all three take the middle's style.
        box = [Segment(char, segments[1].style) for char in word]
        return Strip([*box, *segments[3:]], strip.cell_length)
