"""A row-cursor DataTable whose Home and End move the cursor to the first and last row."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable


class CursorTable(DataTable[Text]):
    BINDINGS = [
        Binding("home", "scroll_top", "First", show=False),
        Binding("end", "scroll_bottom", "Last", show=False),
    ]

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("cursor_type", "row")
        super().__init__(**kw)

    def cursor_key(self) -> str | None:
        """The key of the row under the cursor, None in an empty table."""
        if self.row_count == 0:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:  # noqa: BLE001 - a cursor past the last row while rows are being replaced
            return None

    def move_to(self, key: str) -> bool:
        """Put the cursor on the row ``key``; False when there is no such row."""
        try:
            index = self.get_row_index(key)
        except Exception:  # noqa: BLE001 - RowDoesNotExist
            return False
        self.move_cursor(row=index)
        return True
