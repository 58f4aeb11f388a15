"""Bounded reading at scale: `cockpit runs`, `compare` and `report` on a run with 10M step events.

Fabricates, once, in a temporary folder, a campaign whose training run wrote
N step events (default 10,000,000: about 1.5 GB of events.jsonl, plus a
samples line every 10 steps, an eval every 1,000, and a curve.csv of N rows),
then times each command in a fresh process and reads its peak RSS (wait4),
twice: the first reader builds the run's events summary (summary.json, written
back because it parsed more than 1 MiB), the second finds it. The target
(issue 14): under 2 s and 200 MB each once the summary exists.

``--old REV`` runs the same commands from a git revision before the summary
existed (``git archive`` of that revision, on a smaller run, ``--old-steps``,
default 1,000,000, because the old readers hold every event in memory: at 10M
they ran out of memory) for the side-by-side figures.

    .venv/bin/python bench/read_scale.py                 # 10M steps
    .venv/bin/python bench/read_scale.py --steps 1000000 --old e2a50a6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BLOCK = 20_000


def fabricate(root: Path, steps: int) -> Path:
    """A demo campaign with one training run of ``steps`` updates: events.jsonl, curve.csv, evals.csv, metrics."""
    import tomli_w
    import tomllib

    from cockpit import notebook as nbm
    from cockpit import runs

    camp = root / "campaigns" / "big"
    camp.mkdir(parents=True)
    data = tomllib.loads((ROOT / "cockpit" / "templates" / "demo.toml").read_text("utf-8"))
    for key in ("runs", "decisions", "selection", "rental", "conclusion"):
        data.pop(key, None)
    data["campaign"]["name"] = "big"
    data["batch"]["updates"] = steps
    (camp / "campaign.toml").write_text(tomli_w.dumps(data), "utf-8")
    rid, rdir = runs.create_run(camp, None, 0, kind="train")
    nbm.mutate(camp, lambda nb: setattr(nb.run(rid), "status", "running"))  # a row not settled yet: runs reads it
    t0 = 1_700_000_000.0
    with open(rdir / "events.jsonl", "w", encoding="utf-8") as ev, open(rdir / "curve.csv", "w") as cv:
        ev.write(
            json.dumps(
                {"v": 1, "t": t0, "kind": "run_start", "run_id": rid, "run_kind": "train", "world": 1, "params": {}},
                separators=(",", ":"),
            )
            + "\n"
        )
        ev.write(f'{{"v":1,"t":{t0},"kind":"phase_start","phase":"train","inputs":{{"updates":{steps}}}}}\n')
        cv.write("step,loss,lr,grad_norm,examples_seen,elapsed_s\n")
        for start in range(1, steps + 1, BLOCK):
            ev_lines, cv_lines = [], []
            for s in range(start, min(steps, start + BLOCK - 1) + 1):
                t = t0 + s * 0.01
                loss = 4.0 / (1 + s * 1e-5)
                ev_lines.append(
                    f'{{"v":1,"t":{t:.3f},"kind":"step","step":{s},"loss":{loss:.6f},"lr":0.0001,'
                    f'"grad_norm":1.234567,"examples":16,"duration_s":0.0123,"phase":"train"}}\n'
                )
                if s % 10 == 0:
                    ev_lines.append(
                        f'{{"v":1,"t":{t:.3f},"kind":"sample","phase":"train","rss":123456789,"nvml":null,"torch":null}}\n'
                    )
                if s % 1000 == 0:
                    ev_lines.append(
                        f'{{"v":1,"t":{t:.3f},"kind":"eval","step":{s},"loss":{loss:.6f},"metrics":{{}}}}\n'
                    )
                cv_lines.append(f"{s},{loss:.6f},0.0001,1.234567,{s * 16},{s * 0.01:.2f}\n")
            ev.write("".join(ev_lines))
            cv.write("".join(cv_lines))
        end = t0 + steps * 0.01
        ev.write(
            json.dumps(
                {
                    "v": 1,
                    "t": end,
                    "kind": "run_end",
                    "status": "completed",
                    "stop_reason": f"budget reached: {steps} updates",
                    "phase": "train",
                    "exit_code": 0,
                    "updates": steps,
                    "mem": {"rss_peak": 500 << 20},
                },
                separators=(",", ":"),
            )
            + "\n"
        )
    (rdir / "metrics.json").write_text(
        json.dumps(
            {
                "final_val_loss": 3.5,
                "best_val_loss": 3.5,
                "updates": steps,
                "planned_updates": steps,
                "status": "completed",
                "stop_reason": f"budget reached: {steps} updates",
                "step_time_s": 0.0123,
                "seed": 0,
                "variant": "lr1e-4",
                "peak": {"rss_peak": 500 << 20, "counter": "process peak RSS"},
            }
        )
    )
    return camp


# The command in a fresh interpreter, which reports its own peak RSS (VmHWM: this process only, from its exec;
# wait4's figure would include the bench process it was forked from).
WRAP = """
import sys
from cockpit.cli import main
try:
    code = main(sys.argv[1:])
finally:
    hwm = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print(f"@@peak_kib {hwm}", file=sys.stderr)
sys.exit(code)
"""


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """Wall seconds and peak RSS (MiB) of one command in a fresh process, and its exit code."""
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", WRAP, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd
    )
    wall = time.perf_counter() - t
    err = proc.stderr.decode(errors="replace")
    peak = next((int(x.split()[1]) / 1024 for x in err.splitlines() if x.startswith("@@peak_kib")), float("nan"))
    if proc.returncode != 0:
        print(f"  ! {' '.join(argv)} exited {proc.returncode}: {err.strip()[-300:]}")
    return wall, peak, proc.returncode


def measure(label: str, camp: Path, python_path: str | None, rounds: list[str]) -> None:
    env = {**os.environ, "COLUMNS": "200", "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)
    if python_path:
        env["PYTHONPATH"] = python_path
    for name in rounds:
        for cmd in ("runs", "compare", "report"):
            wall, rss, _ = timed([cmd, str(camp)], env, cwd=camp.parent)
            print(f"{label:<8} {name:<22} cockpit {cmd:<8} {wall:7.2f} s  {rss:8.0f} MiB")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10_000_000)
    p.add_argument("--old", default=None, metavar="REV", help="also time this git revision (before the summary)")
    p.add_argument("--old-steps", type=int, default=1_000_000)
    p.add_argument("--keep", action="store_true", help="leave the fabricated campaigns in place")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cockpit-read-scale-"))
    try:
        t = time.perf_counter()
        camp = fabricate(root / "new", args.steps)
        rdir = next((camp / "runs").iterdir())
        size = (rdir / "events.jsonl").stat().st_size
        print(
            f"fabricated {args.steps:,} step events: events.jsonl {size / 2**20:,.0f} MiB, "
            f"curve.csv {(rdir / 'curve.csv').stat().st_size / 2**20:,.0f} MiB in {time.perf_counter() - t:.1f} s"
        )
        print(f"{'code':<8} {'round':<22} {'command':<16} {'wall':>9}  {'peak RSS':>12}")
        measure("now", camp, None, ["first (builds summary)", "summary exists"])
        if args.old:
            old_src = root / "old-src"
            old_src.mkdir()
            tar = subprocess.run(["git", "-C", str(ROOT), "archive", args.old], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(old_src)], input=tar, check=True)
            old_camp = fabricate(root / "old", args.old_steps)
            print(f"-- {args.old} (every reader loads every event) on {args.old_steps:,} steps; same code now:")
            measure(args.old, old_camp, str(old_src), ["every call"])
            measure("now", old_camp, None, ["first (builds summary)", "summary exists"])
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
