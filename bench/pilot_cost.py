"""What the pilot's checks cost: the same pilot under two versions of Cockpit, side by side in one run.

The silent-error checks (issue 35) add forwards, perturbations and overfit steps to the pilot. This bench pilots
one campaign (the built-in demo by default) with the code of a base commit and with the working tree, in
alternating rounds (base, tree, base, tree, ...) so that the machine's noise hits both alike, and prints the
ratio of the medians: the whole pilot's wall time and each phase's measured duration. The base is checked out
into a temporary git worktree and removed afterwards; every pilot runs in a fresh temporary copy of the campaign,
so no run folder is written into the repository.

    python bench/pilot_cost.py [--base REF] [--rounds 3] [--campaign campaigns/demo]

``--base`` defaults to ``COCKPIT_COST_BASE`` or the commit before the silent-error checks (``14ff4d3``).
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
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASE = os.environ.get("COCKPIT_COST_BASE", "14ff4d3")


@dataclass
class Sample:
    wall_s: float
    status: str
    phases: dict[str, float] = field(default_factory=dict)


def pilot_once(code: Path, campaign: Path, work: Path) -> Sample:
    """One pilot of a fresh copy of ``campaign`` with the ``cockpit`` package found in ``code``."""
    camp = work / campaign.name
    if camp.exists():
        shutil.rmtree(camp)
    shutil.copytree(campaign, camp, ignore=shutil.ignore_patterns("runs", "report", ".*"))
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "cockpit", "pilot", str(camp), "--json", "--no-task-check"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        raise SystemExit(
            f"pilot with the code in {code} printed no JSON (exit {p.returncode}):\n{p.stderr[-2000:]}"
        ) from e
    phases = {g["phase"]: float(g.get("duration_s") or 0.0) for g in doc.get("gates", [])}
    return Sample(wall, str(doc.get("status", "?")), phases)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=DEFAULT_BASE, help="git ref of the code to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--campaign", type=Path, default=ROOT / "campaigns" / "demo")
    args = ap.parse_args()
    campaign = args.campaign.resolve()
    if not (campaign / "campaign.toml").is_file():
        raise SystemExit(f"{campaign}/campaign.toml not found: run ./setup.sh (it makes campaigns/demo) or --campaign")
    with tempfile.TemporaryDirectory(prefix="cockpit-cost-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base],
            check=True,
            capture_output=True,
        )
        try:
            work = Path(tmp) / "work"
            work.mkdir()
            got: dict[str, list[Sample]] = {"base": [], "tree": []}
            for r in range(args.rounds):
                for name, code in (("base", base), ("tree", ROOT)):
                    s = pilot_once(code, campaign, work)
                    got[name].append(s)
                    print(f"round {r + 1} {name}: {s.wall_s:.1f} s, {s.status}", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    b, t = got["base"], got["tree"]
    wb, wt = median([s.wall_s for s in b]), median([s.wall_s for s in t])
    print(f"pilot of {campaign.name}: base {args.base} vs working tree, {args.rounds} rounds each, interleaved")
    print(f"{'':<16}{'base s':>10}{'tree s':>10}{'ratio':>8}")
    print(f"{'whole pilot':<16}{wb:>10.2f}{wt:>10.2f}{wt / wb:>8.2f}")
    names = list(dict.fromkeys([*t[0].phases, *b[0].phases]))
    for ph in names:
        pb = median([s.phases[ph] for s in b if ph in s.phases])
        pt = median([s.phases[ph] for s in t if ph in s.phases])
        ratio = f"{pt / pb:>8.2f}" if pb and pb == pb and pt == pt else f"{'new' if pb != pb else '-':>8}"
        print(f"{ph:<16}{pb:>10.2f}{pt:>10.2f}{ratio}")
    print(f"statuses: base {sorted({s.status for s in b})}, tree {sorted({s.status for s in t})}")


if __name__ == "__main__":
    main()
