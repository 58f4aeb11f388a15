"""A probed run in the live cockpit: a real probe of tests/probe_scripts/plain_loop.py, watched from the TUI."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cockpit import launch, runs
from cockpit.probe.config import ProbeConfig
from cockpit.tui.screens.run import RunScreen
from tests.tui.support import screen_text
from tests.tui.test_screens import shows, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # two interpreters import torch: slow under load

PLAIN = str(Path(__file__).resolve().parents[1] / "probe_scripts" / "plain_loop.py")


async def test_a_probe_appears_live_gate_by_gate(make_app, campaign: Path, tmp_path: Path):
    cfg = ProbeConfig(
        command=[sys.executable, PLAIN, "--sleep", "1.0", "--ckpt", str(tmp_path / "ck.pt")], steps=3, cwd=str(tmp_path)
    )
    app = make_app(campaign=campaign)
    async with app.run_test(size=(100, 30)) as pilot:
        rid, rdir = launch.new_run(campaign, None, 0, kind="probe", nproc=1, extra={"probe": cfg.frozen()})
        try:
            await until(pilot, shows(app, rid), timeout=60, what=f"{rid} in the campaign table")
            await until(pilot, shows(app, "running"), timeout=180, what=f"{rid} running")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, RunScreen), timeout=30, what="the run screen")
            await until(pilot, shows(app, "probe"), timeout=30, what="the header says probe")

            # gates arrive while the script runs: rows pass while the header still says running
            def live() -> bool:
                text = screen_text(app)
                return "/7 gates" in text and "running" in text and "pass" in text and "7/7 gates" not in text

            await until(pilot, live, timeout=240, what="a passed row while the probe runs")
            assert runs.is_alive(rdir)
            await until(pilot, shows(app, "7/7 gates"), timeout=240, what="every row filled")
            await until(pilot, shows(app, "passed"), timeout=120, what="the probe's end")
            text = screen_text(app)
            for phase in ("stack", "forward", "backward", "update_first", "update_second", "validation", "save"):
                assert phase in text
            assert "probe of plain_loop.py" in text
        finally:
            launch.stop(rdir, grace_s=5)
