"""The TUI never imports torch: proven in a fresh interpreter that runs the app headless
through every screen: a pilot, a series run, the device panel, compare and the series dialog."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.tui.support import FIXTURE

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

SCRIPT = """
import asyncio, sys
from cockpit.tui.app import CockpitApp
from cockpit.tui.device import NvmlSource


async def main():
    app = CockpitApp(sys.argv[1], device_source=NvmlSource(), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter")
        await pilot.pause(0.2)
        await pilot.press("escape", "g")
        await pilot.pause(0.2)
        await pilot.press("escape", "down", "down", "enter")  # a series (train) run
        await pilot.pause(0.2)
        await pilot.press("escape", "C")  # compare: tables, then curves
        await app.workers.wait_for_complete()
        await pilot.press("l", "a")
        await pilot.pause(0.2)
        await pilot.press("escape", "S")  # the series dialog plans with cockpit.series
        await pilot.pause(0.2)
        await pilot.press("escape")
        names = {type(s).__name__ for s in app.screen_stack}
        assert names == {"Screen", "CampaignScreen"}, names
asyncio.run(main())
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print("TORCH" if bad else "CLEAN", bad[:3])
"""


def test_tui_never_imports_torch():
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(FIXTURE)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CLEAN" in out.stdout, out.stdout
