"""The inspect table is drawn once (cockpit/inspectview.py): ``cockpit inspect`` and the data screen share it."""

from __future__ import annotations

import io

from rich.console import Console

from cockpit import inspectview as iv
from cockpit.commands import inspect as cli
from cockpit.tui.screens import data as screen

ROW = {"input_ids": [84, 61, 35, 27], "attention_mask": [1, 1, 1, 0], "labels": [-100, 61, 35, -100], "n": 3}


def _lines(tables: list, width: int) -> list[str]:  # type: ignore[type-arg]
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    for t in tables:
        console.print(t)
    return [line.rstrip() for line in buf.getvalue().splitlines()]


def test_both_sides_call_the_one_table() -> None:
    assert _lines(cli.positions(ROW, 80), 80) == _lines(iv.positions(ROW, 80, iv.CLI), 80)
    assert _lines(screen.positions(ROW, 80), 80) == _lines(iv.positions(ROW, 80, screen.SCREEN), 80)


def test_the_cli_table_keeps_its_layout_and_the_screen_cleans_and_caps_values() -> None:
    assert _lines(cli.positions(ROW, 80), 80) == [  # as `cockpit inspect` has always printed it
        "pos                0    1    2    3",
        "input_ids         84   61   35   27",
        "attention_mask     1    1    1    0",
        "labels          -100   61   35 -100",
    ]
    odd = {"ids": ["a\x1bb", "x" * 30]}
    shown = _lines(screen.positions(odd, 80), 80)
    assert "\x1b" not in "".join(shown) and max(len(line) for line in shown) <= 4 + 12 + 1 + 12


def test_decoded_text_marks_what_the_loss_counts() -> None:
    text = iv.text_of({"text": [["Q: ", False], ["A", True]]}, iv.CLI)
    assert text.plain == "Q: A"
    assert [(s.start, s.end, s.style) for s in text.spans] == [(0, 3, iv.MASKED), (3, 4, iv.SUPERVISED)]
    assert "no decode" in iv.text_of({}, iv.CLI).plain and "no decode" in screen.text_of({}).plain
