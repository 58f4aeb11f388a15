"""A series on Ray (issue 41): wall time of one 12-run CPU series on 1 node against 3 nodes of the same local
cluster, and Ray's overhead per run against a local ``--parallel 1`` series, all measured side by side in one run
of this bench. The overhead per run is what a series of one lane (one run at a time: local ``--parallel 1``, or
Ray on one node of one CPU) spends beyond its runs' own time (each run's first event to its last, written by the
run's own process): ``(wall - sum of run times) / runs``, which holds placement, the working_dir's copy, the
process start up to its first event, and the hand-over between runs.

    .venv/bin/python bench/ray_series.py             # 12 runs (3 variants x 4 seeds), 4 updates each
    .venv/bin/python bench/ray_series.py --seeds 0-1 # 6 runs

The clusters are this machine's (``tests/integration/ray_cluster.py``): a head and workers of one CPU each,
each a ``ray start`` with its own temp dir, stopped by the bench process by process (never a broad ``ray stop``).
Three nodes of one CPU each on a machine of N cores cannot train faster than min(3, N) runs at once: the bench
prints the cores it had, so a ratio below 3 on a 2-core machine reads as the machine's, not Ray's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cockpit import notebook as nbm  # noqa: E402
from cockpit import runs  # noqa: E402
from tests.integration.ray_cluster import LocalCluster, cluster_env  # noqa: E402
from tests.integration.test_series import tiny_campaign  # noqa: E402

VARIANTS = "lr1e-4,lr5e-5,lr2e-4"


def series(camp: Path, extra: list[str], seeds: str, updates: int, env: dict[str, str]) -> tuple[float, list[float]]:
    """Run one series to its end; returns its wall time and, per run, its own time (first event to last)."""
    cmd = [sys.executable, "-m", "cockpit", "series", str(camp), "--variants", VARIANTS, "--seeds", seeds]
    cmd += ["--updates", str(updates), "--without-pilot", "the Ray bench", *extra]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait(timeout=3600)
    reader.join(timeout=10)
    wall = time.time() - t0
    if code != 0:
        raise SystemExit(f"the series {' '.join(extra) or '(local)'} failed ({code}):\n{''.join(lines[-40:])}")
    rows = [r for r in nbm.load(camp).runs if r.kind == "train"]
    gaps = []
    for r in rows:
        events = runs.read_events(runs.run_dir(camp, r.id))
        gaps.append(float(events[-1]["t"]) - float(events[0]["t"]))
    bad = [(r.id, r.status) for r in rows if r.status != "completed"]
    if bad:
        raise SystemExit(f"runs that did not complete: {bad}\n{''.join(lines[-40:])}")
    return wall, gaps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-3")
    ap.add_argument("--updates", type=int, default=4)
    args = ap.parse_args()
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray is not installed (pip install 'cockpit[ray]'): nothing to measure", file=sys.stderr)
        return 2
    env = {**cluster_env(), "PYTHONPATH": str(ROOT)}
    root = Path(tempfile.mkdtemp(prefix="crb", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    figures: dict[str, tuple[float, list[float]]] = {}
    try:
        local = tiny_campaign(root, "local")
        figures["local --parallel 1"] = series(local, ["--parallel", "1"], args.seeds, args.updates, env)
        for nodes in (1, 3):
            cl = LocalCluster(root / f"n{nodes}", env)
            try:
                cl.start([(f"w{i}", 0, "") for i in range(nodes - 1)])
                camp = tiny_campaign(root, f"ray{nodes}")
                figures[f"Ray, {nodes} node{'s' if nodes > 1 else ''}"] = series(
                    camp, ["--ray", cl.address], args.seeds, args.updates, env
                )
            finally:
                cl.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = len(next(iter(figures.values()))[1])
    print(f"a series of {n} CPU runs of {args.updates} updates each; {os.cpu_count()} cores on this machine")
    print(f"{'where':<20} {'wall s':>8} {'run s (median)':>15} {'beyond the runs, per run s':>27}")
    beyond = {}
    for name, (wall, own) in figures.items():
        beyond[name] = (wall - sum(own)) / len(own)
        lanes = "" if name != "Ray, 3 nodes" else " (3 lanes: not a per-run figure)"
        print(f"{name:<20} {wall:8.1f} {statistics.median(own):15.2f} {beyond[name]:27.2f}{lanes}")
    one, three = figures["Ray, 1 node"][0], figures["Ray, 3 nodes"][0]
    print(f"wall time, 1 node / 3 nodes: {one / three:.2f}x (at most min(3, cores) = {min(3, os.cpu_count() or 1)})")
    local, ray1 = beyond["local --parallel 1"], beyond["Ray, 1 node"]
    print(
        f"Ray's overhead per run against local --parallel 1: {ray1 - local:+.2f} s ({ray1:.2f} s against {local:.2f} s)"
    )
    print(
        json.dumps({k: {"wall_s": round(w, 2), "runs_s": [round(g, 2) for g in gs]} for k, (w, gs) in figures.items()})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
