"""Keyed DataTable rows updated cell by cell (dolphie's way): no clearing, no flicker,
and the cursor stays where the user put it."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable


def put_row(
    table: DataTable,
    shown: dict[str, tuple[str, ...]],
    key: str,
    cells: Sequence[Text],
    columns: Sequence[str],
) -> None:
    """Add the row ``key`` or update only the cells whose text or style changed."""
    plain = tuple(c.markup for c in cells)
    before = shown.get(key)
    if before is None:
        table.add_row(*cells, key=key)
    elif before != plain:
        for col, old, new, cell in zip(columns, before, plain, cells, strict=True):
            if old != new:
                table.update_cell(key, col, cell, update_width=True)
    shown[key] = plain
