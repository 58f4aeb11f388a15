"""``cockpit estimate`` on a GPT-2-small-sized campaign: how long the estimate takes here and what it predicts.

The campaign is tests/estimate's nanoGPT-shaped task at GPT-2 124M (12 layers, 12 heads, 768 wide, block 1024,
vocab 50,304), bf16 autocast, fused AdamW, microbatch 8, every example 1,024 tokens long. One GPT-2 124M step of
that shape, measured on an H200 with fused AdamW, peaked at 8,300 MiB allocated (DESIGN.md): the ratio to it is
printed. The wall time includes starting Python and torch, as a user running the command waits for it.

    .venv/bin/python bench/estimate.py                # the table too (a second trace at microbatch 4)
    .venv/bin/python bench/estimate.py --no-table     # the campaign's microbatch only
    .venv/bin/python bench/estimate.py --sliced       # the collate as commonly written: labels = t[:, 1:]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURED_H200_MIB = 8300.0

CAMPAIGN = """\
[campaign]
name = "gpt2-small-estimate"
question = "Which GPU does GPT-2 124M need at microbatch 8 and length 1024?"

[task]
entry = "gpt_task.py:task"

[task.params]
vocab = 50304
block = 1024
layers = 12
heads = 12
d = 768
n_train = 16
fused = true

[batch]
microbatch = 8
accumulation = 1
updates = 10

[training]
lr = 0.0006
precision = "bf16"

[[variants]]
id = "ref"
reference = true
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-table", action="store_true", help="trace the campaign's microbatch only")
    ap.add_argument(
        "--sliced",
        action="store_true",
        help="the collate returns input_ids = t[:, :-1] and labels = t[:, 1:] of one tensor (issue 38)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cockpit-estimate-bench-") as tmp:
        folder = Path(tmp) / "gpt2"
        folder.mkdir()
        text = CAMPAIGN.replace("fused = true\n", "fused = true\nsliced = true\n") if args.sliced else CAMPAIGN
        (folder / "campaign.toml").write_text(text)
        shutil.copy(ROOT / "tests" / "estimate" / "gpt_task.py", folder / "gpt_task.py")
        cmd = [sys.executable, "-m", "cockpit", "estimate", str(folder), "--json"]
        if args.no_table:
            cmd.append("--no-table")
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        import json

        e = json.loads(proc.stdout)
    collate = ", sliced collate (labels = t[:, 1:])" if args.sliced else ""
    print(f"GPT-2 124M, bf16, fused AdamW, microbatch 8 x 1,024 tokens{collate} ({e['parameters']:,} parameters)")
    print(f"  estimate: {wall:.1f} s wall (command start to end), {e['seconds']:.1f} s tracing")
    print(f"  {'phase':<14} {'allocated':>10} {'reserved':>10} {'NVML':>10} {'CPU sem.':>10}  (MiB)")
    for p in e["phases"]:
        cpu = f"{p['cpu_allocated_mib']:>10,.0f}" if p.get("cpu_allocated_mib") is not None else ""
        print(
            f"  {p['name']:<14} {p['allocated_mib']:>10,.0f} {p['reserved_mib']:>10,.0f} {p['nvml_mib']:>10,.0f} {cpu}"
        )
    peak = e["peak_allocated_mib"]
    print(
        f"  predicted peak allocated {peak:,.0f} MiB in {e['peak_phase']}; measured on an H200 "
        f"{MEASURED_H200_MIB:,.0f} MiB: {peak / MEASURED_H200_MIB:.3f}x"
    )
    for f in e["fits"]:
        longest = f" longest length {f['longest_length']:,}" if e.get("length") else ""
        print(
            f"  {f['gpu']:<8} fits {'yes' if f['fits'] else 'no ':<4} largest microbatch {f['largest_microbatch']}{longest}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
