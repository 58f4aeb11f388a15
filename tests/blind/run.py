"""``python -m tests.blind.run [CASE ...] [--keep DIR]``: pilot blind cases one at a time and print every gate's
verdict and each check that failed or warned."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from cockpit import launch, runs
from tests.blind.campaigns import CASES, write
from tests.shelf.run import ROOT, log_tail, running_still


def pilot(root: Path, name: str, deadline_s: float = 1200) -> runs.RunState:
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    _, rdir = launch.new_run(write(root, name), None, 0, env=env)
    end = time.monotonic() + deadline_s
    while running_still(rdir):
        if time.monotonic() > end:
            launch.stop(rdir, grace_s=5)
            break
        time.sleep(0.5)
    launch.reap()
    return runs.state(rdir)


def report(name: str, st: runs.RunState) -> str:
    lines = [f"== {name}: {st.status} ({st.stop_reason or ''})"]
    lines.append("   " + ", ".join(f"{g['phase']}={g['verdict']}" for g in st.gates))
    for g in st.gates:
        for c in g.get("checks", []):
            if not c.get("ok", True):
                kind = "warn" if c.get("warn") else "fail"
                lines.append(f"   {kind} {g['phase']} / {c['name']}: {c.get('detail', '')}")
    if st.status not in ("passed", "completed"):
        lines.append(log_tail(st, 1500))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="cockpit-blind-"))
    root.mkdir(parents=True, exist_ok=True)
    for name in args.cases or list(CASES):
        t = time.monotonic()
        st = pilot(root, name)
        print(report(name, st), f"\n   ({time.monotonic() - t:.0f} s, {st.dir})", flush=True)


if __name__ == "__main__":
    main()
