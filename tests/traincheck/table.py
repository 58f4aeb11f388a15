"""The TrainCheck reproductions' table: ``python -m tests.traincheck.table [ID ...] [--keep DIR] [--json]``.

Probes each reproduction's buggy and fixed script as a user would (``cockpit probe -- python SCRIPT``, in a
folder of its own) and prints one row per reproduction: the buggy script's outcome and the check that named it,
whether that is the check the reproduction expects, and the fixed script's outcome, which must be clean (no
failed or warned check). Below the table, the message of each catch, then the reproductions left out and why.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cockpit import runs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass(frozen=True)
class Reproduction:
    id: str  # TrainCheck's folder name
    stem: str  # <stem>_buggy.py, <stem>_fixed.py here
    defect: str
    phase: str  # where the probe must name it
    check: str
    words: str  # a phrase the check's detail must hold
    verdict: str = "fail"  # "fail", or "warn" for an expected difference the check cannot call a contradiction


REPRODUCTIONS = (
    Reproduction(
        "pytorch-forum-84911",
        "pytorch_forum_84911",
        "every layer but BatchNorm frozen by a name filter, the head too",
        "update_first",
        "what trains",
        "only the normalisation layers train",
        verdict="warn",
    ),
    Reproduction(
        "stackoverflow-60335387",
        "stackoverflow_60335387",
        "optimizer.zero_grad() missing",
        "update_second",
        "gradients zeroed between updates",
        "never zeroed",
    ),
    Reproduction(
        "pytorch-104336",
        "pytorch_104336",
        "DDP model moved (cast) after wrapping: gradients not all-reduced",
        "update_first",
        "gradients averaged across ranks",
        "unaveraged",
    ),
    Reproduction(
        "x-jxmnop-ddp-out-of-sync",
        "x_jxmnop_ddp_out_of_sync",
        "steps through the bare module instead of its DDP wrapper",
        "update_first",
        "gradients averaged across ranks",
        "unaveraged",
    ),
)

LEFT_OUT = {
    "baichuan2-86, pytorch-84803, pytorch-96600": "hardware: data lost over GPU peer-to-peer links (fault injection on GPUs)",
    "deepspeed-1801, deepspeed-5794": "bugs inside DeepSpeed (BF16 optimizer clipping, MoE all_to_all), several GPUs",
    "lightning-thunder-725": "a bug inside lightning-thunder's autocast transform",
    "mmpretrain-702": "a bug inside mmpretrain: frozen_stages applied only by train(); nothing in the script says a "
    "stage was meant to be frozen",
    "pytorch-115607": "a bug inside torch._dynamo (a step count not advanced when gradients are None)",
    "pytorch-51800": "torch's spectral_norm initialising on the first forward (a library behaviour)",
    "stackoverflow-67180955": "NumPy's generator repeated across DataLoader workers: fixed in torch 1.9, which seeds "
    "NumPy per worker; does not reproduce on the torch installed",
    "transformers-17877, -23723, -33844, -34204": "bugs inside Hugging Face transformers",
}


@dataclass
class Finding:
    phase: str
    check: str
    verdict: str  # "fail" or "warn"
    detail: str


@dataclass
class Probed:
    script: str
    status: str
    stop_reason: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.status == "passed" and not self.findings

    def summary(self) -> str:
        if self.clean:
            return f"{self.status}, clean"
        if not self.findings:
            return f"{self.status}: {self.stop_reason}"
        first = next((f for f in self.findings if f.verdict == "fail"), self.findings[0])
        return f"{self.status}, {first.verdict}: {first.phase} / {first.check}"


@dataclass
class Row:
    id: str
    defect: str
    expected: str
    buggy: Probed
    fixed: Probed
    named: bool  # the expected check fails (or warns) at the expected phase, with the expected words

    @property
    def ok(self) -> bool:
        return self.named and self.fixed.clean


def findings(run: runs.RunFiles) -> list[Finding]:
    out = []
    for g in run.gates:
        for c in g.get("checks") or []:
            if not c["ok"]:
                verdict = "warn" if c.get("warn") else "fail"
                out.append(Finding(g["phase"], c["name"], verdict, c.get("detail", "")))
    return out


def probe(script: Path, where: Path) -> Probed:
    """``cockpit probe -- python SCRIPT`` run in ``where``, as a user would; its outcome and every finding."""
    where.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "OUT": str(where)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "probe", "--json", "--", sys.executable, str(script)],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        summary: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        return Probed(script.name, "error", f"cockpit probe printed no summary: {done.stderr[-500:]}")
    run = runs.read_run(where / summary["dir"])  # the summary names the run folder from where the probe ran
    if run is None:
        return Probed(script.name, "error", f"no run folder at {where / summary['dir']}")
    found = findings(run)
    return Probed(script.name, str(summary.get("status")), str(summary.get("stop_reason") or ""), found)


def row(r: Reproduction, base: Path) -> Row:
    buggy = probe(HERE / f"{r.stem}_buggy.py", base / f"{r.stem}_buggy")
    fixed = probe(HERE / f"{r.stem}_fixed.py", base / f"{r.stem}_fixed")
    named = any(
        f.phase == r.phase and f.check == r.check and f.verdict == r.verdict and r.words in f.detail
        for f in buggy.findings
    )
    return Row(r.id, r.defect, f"{r.phase} / {r.check} ({r.verdict})", buggy, fixed, named)


def table(rows: list[Row]) -> str:
    head = ("reproduction", "buggy", "named", "fixed")
    cells = [
        (x.id, x.buggy.summary(), "yes" if x.named else f"NO (expected {x.expected})", x.fixed.summary()) for x in rows
    ]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(4)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(4)).rstrip() for c in [head, *cells]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    caught = sum(x.named for x in rows)
    clean = sum(x.fixed.clean for x in rows)
    lines.append(
        f"\n{caught} of {len(rows)} caught with their cause named; {clean} of {len(rows)} fixed versions clean"
    )
    for x in rows:
        lines.append(f"\n{x.id}: {x.defect}")
        for f in x.buggy.findings:
            lines.append(f"  buggy {f.phase} / {f.check} ({f.verdict}): {f.detail}")
        for f in x.fixed.findings:
            lines.append(f"  FIXED {f.phase} / {f.check} ({f.verdict}): {f.detail}")
        if not x.fixed.clean and not x.fixed.findings:
            lines.append(f"  FIXED {x.fixed.status}: {x.fixed.stop_reason}")
    lines.append("\nleft out (not a training script's defect, or not on a CPU):")
    lines.extend(f"  {k}: {v}" for k, v in LEFT_OUT.items())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.traincheck.table", description=__doc__)
    ap.add_argument("ids", nargs="*", help="reproductions to run (TrainCheck's names); all by default")
    ap.add_argument("--keep", help="probe in this folder and keep the runs (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="the rows as JSON")
    a = ap.parse_args(argv)
    chosen = [r for r in REPRODUCTIONS if not a.ids or r.id in a.ids]
    unknown = set(a.ids) - {r.id for r in REPRODUCTIONS}
    if unknown:
        print(f"unknown reproductions: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="traincheck-") as tmp:
        base = Path(a.keep) if a.keep else Path(tmp)
        rows = [row(r, base) for r in chosen]
    print(json.dumps([asdict(x) for x in rows], indent=1) if a.json else table(rows))
    return 0 if all(x.ok for x in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
