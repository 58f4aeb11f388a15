"""Keyed DataTable rows updated cell by cell (dolphie's way): no clearing, no flicker,
and the cursor stays where the user put it.

Cheap at a thousand rows: a cell is compared by its text, style and spans (not by
rendering it to markup), and a column is widened only when a cell outgrows it. Asking
DataTable to fit a column after every update re-measures the whole column whenever a
cell gets narrower, which made filling a 1,000-run table take 20 s of the UI thread.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from rich.text import Text
from textual.widgets import DataTable


def signature(cell: Text) -> Hashable:
    """What decides how a cell looks: its text, its style and its styled spans."""
    return cell.plain, cell.style, tuple(cell.spans)


def put_row(
    table: DataTable,
    shown: dict[str, tuple[Hashable, ...]],
    key: str,
    cells: Sequence[Text],
    columns: Sequence[str],
) -> None:
    """Add the row ``key`` or update only the cells whose text or style changed.

    A column of fixed width never needs measuring; an auto-width one grows when a cell is
    wider than it (never shrinks: a clear and refill, on a filter or a sort, fits it again).
    """
    plain = tuple(signature(c) for c in cells)
    before = shown.get(key)
    if before is None:
        table.add_row(*cells, key=key)
    elif before != plain:
        for col, old, new, cell in zip(columns, before, plain, cells, strict=True):
            if old != new:
                column = table.columns.get(col)  # type: ignore[call-overload]
                grow = column is not None and column.auto_width and cell.cell_len > column.content_width
                table.update_cell(key, col, cell, update_width=grow)
    shown[key] = plain
