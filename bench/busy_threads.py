"""The demo pilot on a busy box: torch's threads as Cockpit now fits them, against all CPUs and against one thread.

Other processes keep the CPUs busy (busy loops, ``--load`` per CPU); the same demo pilot then runs, interleaved, with
``OMP_NUM_THREADS`` set to every CPU this process may use (torch's default, what the pilot did before), with nothing
set (Cockpit fits the threads to the CPUs left free), and with ``OMP_NUM_THREADS=1``. Wall times side by side, and
each against one thread: the fitted pilot should be within noise of one thread on a busy box and never slower than
all CPUs.

    .venv/bin/python bench/busy_threads.py                 # 2 busy loops per CPU, 2 rounds
    .venv/bin/python bench/busy_threads.py --load 0        # an idle box: fitted against all CPUs
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cockpit.machine import available_cpus  # noqa: E402

BUSY = "while True: pass"


def pilot(campaign: Path, threads: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cockpit", "pilot", str(campaign)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the pilot failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", type=float, default=2.0, help="busy loops per CPU (default 2)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cpus = int(available_cpus())
    forms = {"all CPUs (before)": str(cpus), "fitted (now)": None, "one thread": "1"}
    times: dict[str, list[float]] = {k: [] for k in forms}
    with tempfile.TemporaryDirectory() as tmp:
        camp = Path(tmp) / "campaigns" / "demo"
        shutil.copytree(
            ROOT / "campaigns" / "demo", camp, ignore=shutil.ignore_patterns("runs", "report", ".campaign*")
        )
        loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(round(args.load * cpus))]
        try:
            time.sleep(2.0 if loops else 0.0)
            for r in range(args.rounds):
                for name, threads in forms.items():
                    times[name].append(pilot(camp, threads))
                    print(f"round {r + 1}: {name:<18} {times[name][-1]:6.1f} s", flush=True)
        finally:
            for p in loops:
                p.kill()
    one = statistics.median(times["one thread"])
    print(f"\nthe demo pilot, {len(loops)} busy loops on {cpus} CPUs, median of {args.rounds} rounds")
    print(f"{'threads':<18} {'wall s':>8} {'/ one thread':>13}")
    for name in forms:
        med = statistics.median(times[name])
        print(f"{name:<18} {med:8.1f} {med / one:13.2f}x")


if __name__ == "__main__":
    main()
