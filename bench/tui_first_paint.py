"""Time to first paint of ``cockpit tui``: from starting the process to the campaign on screen.

Two measurements, each repeated (median and worst printed):

- terminal: the real ``python -m cockpit tui CAMPAIGN`` in a tmux pane
  (100x30), polling ``tmux capture-pane`` every 10 ms until the campaign's
  question is on screen. This is what a user over SSH waits for.
- headless: the same app in a fresh interpreter, headless, until its first
  screen has been composed and rendered (no terminal in the way), with the
  import time of ``cockpit.tui.app`` apart.

The target is under 1 s on a 2-core machine; the ratio to it is printed.
Run: ``.venv/bin/python bench/tui_first_paint.py [--runs 5] [CAMPAIGN]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "tui" / "fixtures" / "demo"
TARGET_S = 1.0

HEADLESS = r"""
import time, json, sys
t0 = time.perf_counter()
from cockpit.tui.app import CockpitApp
from cockpit.tui.device import StaticDeviceSource
t_import = time.perf_counter() - t0
out = {}

async def first(pilot):
    await pilot.pause()
    out["painted"] = time.perf_counter() - t0
    pilot.app.exit()

CockpitApp(sys.argv[1], device_source=StaticDeviceSource(), watch=False).run(headless=True, auto_pilot=first,
                                                                              size=(100, 30))
print(json.dumps({"import": t_import, "painted": out["painted"]}))
"""


def terminal_once(campaign: Path, marker: str) -> float | None:
    socket = f"cockpit-bench-{uuid.uuid4().hex[:8]}"
    cmd = f"{sys.executable} -m cockpit tui {campaign}"
    env = dict(os.environ, TERM="xterm-256color")
    t0 = time.perf_counter()
    subprocess.run(
        ["tmux", "-L", socket, "new-session", "-d", "-x", "100", "-y", "30", "-s", "b", cmd], env=env, check=True
    )
    try:
        while time.perf_counter() - t0 < 30:
            screen = subprocess.run(
                ["tmux", "-L", socket, "capture-pane", "-p", "-t", "b"], capture_output=True, text=True
            ).stdout
            if marker in screen:
                return time.perf_counter() - t0
            time.sleep(0.01)
        return None
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def headless_once(campaign: Path) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", HEADLESS, str(campaign)], capture_output=True, text=True, check=True, timeout=60
    )
    wall = time.perf_counter() - t0
    data = json.loads(out.stdout.strip().splitlines()[-1])
    # interpreter start-up is the wall time the in-process clock did not see
    startup = wall - (data["painted"] + 0.0)
    return wall, data["import"], max(0.0, startup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("campaign", nargs="?", default=str(FIXTURE))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    campaign = Path(args.campaign).resolve()
    from cockpit import notebook

    marker = notebook.load(campaign).campaign.question[:30] or "Runs"
    print(f"first paint of cockpit tui {campaign} ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    if shutil.which("tmux"):
        times = [t for t in (terminal_once(campaign, marker) for _ in range(args.runs)) if t is not None]
        if times:
            med = statistics.median(times)
            print(
                f"terminal (tmux): median {med:.3f} s, worst {max(times):.3f} s over {len(times)} runs"
                f"  = {med / TARGET_S:.2f}x the {TARGET_S:g} s target"
            )
    else:
        print("terminal (tmux): skipped, tmux is not installed")
    runs = [headless_once(campaign) for _ in range(args.runs)]
    walls = [r[0] for r in runs]
    med = statistics.median(walls)
    print(
        f"headless: median {med:.3f} s, worst {max(walls):.3f} s (process start to first frame)"
        f"  = {med / TARGET_S:.2f}x the target; of which importing cockpit.tui.app"
        f" {statistics.median(r[1] for r in runs):.3f} s, interpreter start and exit"
        f" {statistics.median(r[2] for r in runs):.3f} s"
    )


if __name__ == "__main__":
    main()
