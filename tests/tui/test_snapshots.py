"""Snapshots of the main screens at 80x24 and 120x40, against the recorded campaign (and, for some, the
recorded campaign grown by ``tests/tui/scenarios.py``: 200 runs, many seeds, a stopped pilot).

Deterministic: fixed event times, a fake device source (no NVML), no clocks
on screen, and every worker finished before the picture is taken.
Update with ``pytest tests/tui/test_snapshots.py --snapshot-update`` after
checking the report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Input

from cockpit.tui.app import Intervals

from . import scenarios

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

SIZES = [(80, 24), (120, 40)]
SCREENS = {
    "campaign": [],
    "run_passed": ["enter"],
    "run_crashed": ["down", "enter"],
    "data": ["i"],
    "device": ["g"],
    "help": ["question_mark"],
    "compare_tables": ["C"],
    "compare_curves": ["C", "l"],
    "train_run": ["down", "down", "enter"],
    "train_diverged": ["down"] * 8 + ["enter"],
    "series_dialog": ["S"],
    # hundreds of runs, many seeds, a stopped pilot, a dialog that keeps an invalid entry
    "runs_200": ["end"],
    "compare_many_seeds": ["C", "l"],
    "compare_many_seeds_tables": ["C"],
    "stopped_pilot": ["end", "enter"],
    "stopped_gate": ["end", "enter", "end", "up", "up", "up", "up", "up", "enter"],
    "dialog_invalid": ["s", "tab", "tab", *"bf61", "tab", *"two", "ctrl+s"],
}
SETUP: dict[str, Callable[[Path], object]] = {
    "runs_200": lambda campaign: scenarios.add_series(campaign, 189),
    "compare_many_seeds": lambda campaign: scenarios.add_series(campaign, 48),
    "compare_many_seeds_tables": lambda campaign: scenarios.add_series(campaign, 48),
    "stopped_pilot": scenarios.add_stopped_pilot,
    "stopped_gate": scenarios.add_stopped_pilot,
}
SLOW = Intervals(events_s=30, runs_s=30, notebook_s=30, device_s=30)


async def settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.1)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_snapshot(snap_compare, make_app, recorded, screen, size):
    if screen in SETUP:
        SETUP[screen](recorded)
    app = make_app(gpu=True, timing=SLOW, watch=False)

    async def run_before(pilot) -> None:
        await settle(pilot)
        for key in SCREENS[screen]:
            await pilot.press(key)
        await settle(pilot)
        # A text field's cursor blinks every half second: the picture would depend on when it is taken
        # (it did, on a loaded machine). Shown steadily, as at the moment a key was typed.
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
