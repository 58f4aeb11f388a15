"""What reaches the loss, drawn once for ``cockpit inspect`` and the TUI's data screen: an example's decoded text
with the supervised spans highlighted, and its batch row position by position. Rich only (no torch, no textual).

The two callers differ in how a value becomes text (the TUI cleans control characters and caps a cell; the CLI
prints values as they are) and in the room they leave beside the labels: a :class:`Layout` says which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

SUPERVISED = "bold black on green"  # the part of the text the loss counts
MASKED = "dim"
IGNORE = -100  # a label the loss ignores
LABEL = "bold green"


def _as_is(value: object, style: str = "", limit: int = 0) -> Text:
    return Text(str(value), style=style)


@dataclass(frozen=True)
class Layout:
    """How values are written and how much room a table of positions takes."""

    text: Callable[[object, str], Text]  # a span of decoded text (newlines kept)
    cell: Callable[[object, str, int], Text]  # a value on one line, at most the given width (0: no cap)
    key: Callable[[str], str]  # a row's name, as shown
    cap: int | None  # the widest cell; None: as wide as the widest value
    spare: int  # columns left free beside the names when fitting positions into the width
    gap: int  # blank columns after the names, beside the one before every column
    no_decode: str  # said in place of the text when the task has no decode function


CLI = Layout(
    text=lambda v, style: _as_is(v, style),
    cell=_as_is,
    key=str,
    cap=None,
    spare=2,
    gap=1,
    no_decode="(the task has no decode function)",
)


def text_of(example: Mapping[str, object], layout: Layout) -> Text:
    """The decoded text: supervised spans highlighted, masked spans dimmed."""
    out = Text()
    text = example.get("text")
    if isinstance(text, list):
        for span in text:
            if isinstance(span, (list, tuple)) and len(span) == 2:
                out.append_text(layout.text(span[0], SUPERVISED if span[1] else MASKED))
            else:
                out.append_text(layout.text(span, ""))
    elif text is not None:
        out.append_text(layout.text(text, ""))
    else:
        out.append(layout.no_decode, style="dim italic")
    return out


def positions(row: Mapping[str, object], width: int, layout: Layout) -> list[Table]:
    """The batch row position by position, positions across, in blocks that fit ``width`` columns."""
    lists = {
        layout.key(k): v
        for k, v in row.items()
        if isinstance(v, list) and all(not isinstance(x, (list, dict)) for x in v)
    }
    if not lists:
        return []
    n = max(len(v) for v in lists.values())
    widest = max([3] + [len(layout.cell(x, "", layout.cap or 0).plain) for v in lists.values() for x in v])
    cell = min(layout.cap, widest) if layout.cap else widest
    label_w = max(len(k) for k in lists) + layout.gap
    per_block = max(4, (width - label_w - layout.spare) // (cell + 1))  # each column and the space before it
    masked = lists.get("attention_mask")
    blocks = []
    for start in range(0, n, per_block):
        tab = Table.grid(padding=(0, 1), pad_edge=False)
        tab.add_column(width=label_w, no_wrap=True)
        stop = min(n, start + per_block)
        for _ in range(start, stop):
            tab.add_column(justify="right", width=cell, no_wrap=True)
        tab.add_row(Text("pos", style="dim"), *(Text(str(i), style="dim") for i in range(start, stop)))
        for k, v in lists.items():
            cells = []
            for i in range(start, stop):
                x = v[i] if i < len(v) else ""
                style = ""
                pad = masked is not None and i < len(masked) and masked[i] == 0
                if "label" in k or "target" in k:
                    style = MASKED if x == IGNORE or x == "" else LABEL
                elif pad:
                    style = MASKED
                cells.append(layout.cell(x, style, cell if layout.cap else 0))
            tab.add_row(Text(k, style="bold"), *cells)
        blocks.append(tab)
    return blocks
