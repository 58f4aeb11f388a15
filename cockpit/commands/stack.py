"""``cockpit stack [CAMPAIGN]``: check this machine's software stack, item by item.

torch is imported in a child process (``python -m cockpit.pilot.stackcheck``),
never here: a broken CUDA install shows as a failed item, not a crash. With a
campaign, the check also imports every extension its task declares and asks
for bf16 and NCCL when the campaign needs them.

Exit code 0 when the stack passes for the campaign, 1 when an item fails or
there is no GPU (unless the campaign trains on the CPU: ``training.device = "cpu"``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from typing import TypedDict, cast

from .. import notebook as nbm
from ..notebook.settings import Settings
from ..pilot.stackcheck import MARK
from ..schema import Stack

TIMEOUT_S = 300


@dataclass
class Needs:
    extensions: tuple[str, ...] = ()
    bf16: bool = False  # the campaign trains in bf16
    nccl: bool = False  # more than one GPU per run
    gpu: bool = True  # False only when the campaign trains on the CPU on purpose
    source: str = "no campaign given"


class KernelRan(TypedDict, total=False):
    """Whether a small matmul ran on one GPU (in bf16 too when supported), or how it failed."""

    index: int
    fp32: bool
    bf16: bool
    error: str


class ExtensionImport(TypedDict, total=False):
    module: str
    ok: bool
    version: str
    error: str


class StackReport(Stack, total=False):
    """What ``python -m cockpit.pilot.stackcheck`` reports (the stack, :class:`cockpit.schema.Stack`, with the
    kernels and the extensions; only ``torch_error`` and ``extensions`` when torch could not be used)."""

    torch_error: str
    extensions: list[ExtensionImport]
    kernels: list[KernelRan]


@dataclass
class StackCheck:
    name: str
    status: str  # pass | fail | absent | n/a
    detail: str


def needs_of(nb: nbm.Notebook) -> Needs:
    settings = [Settings.of(nb, v.id) for v in nb.variants]
    return Needs(
        extensions=tuple(nb.task.extensions),
        bf16=any(s.precision == "bf16" for s in settings),
        nccl=any(s.gpus > 1 for s in settings),
        gpu=nb.training.device != "cpu",
        source=str(nb.path),
    )


def probe(extensions: tuple[str, ...], timeout_s: float = TIMEOUT_S) -> StackReport:
    """Run the stack check in a child process and return what it found (or how it died)."""
    cmd = [sys.executable, "-m", "cockpit.pilot.stackcheck"]
    for e in extensions:
        cmd += ["--extension", e]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {
            "torch_error": f"the check process did not finish in {timeout_s:.0f} s (a hung CUDA "
            "initialisation or driver)",
            "extensions": [],
        }
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            try:
                return cast(StackReport, json.loads(line[len(MARK) :]))  # the child's own report
            except ValueError:
                break
    tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return {"torch_error": f"the check process died ({how}) before reporting: {tail or 'no output'}", "extensions": []}


def items(info: StackReport, needs: Needs) -> list[StackCheck]:
    """Each stack item with pass/fail, from the child's report and what the campaign needs."""
    out: list[StackCheck] = []
    if info.get("torch_error"):
        out.append(StackCheck("torch", "fail", f"cannot use torch: {info['torch_error']}"))
        for e in info.get("extensions", []):
            out.append(_ext(e))
        return out
    build = info.get("build", "?")
    out.append(StackCheck("torch", "pass", f"torch {info.get('torch')} ({build} build), Python {info.get('python')}"))
    gpus = info.get("gpus") or []
    has_gpu = bool(info.get("cuda_available")) and bool(gpus)
    miss = "fail" if needs.gpu else "n/a"
    if build == "cuda":
        out.append(
            StackCheck(
                "CUDA runtime",
                "pass" if info.get("cuda_available") else "fail",
                f"CUDA {info.get('cuda')}"
                + (
                    ""
                    if info.get("cuda_available")
                    else ": torch cannot use it (no GPU visible, or the driver is too old)"
                ),
            )
        )
    else:
        out.append(StackCheck("CUDA runtime", miss, f"none: torch is a {build} build"))
    if info.get("driver"):
        out.append(StackCheck("driver", "pass", f"NVIDIA driver {info['driver']}"))
    else:
        out.append(
            StackCheck(
                "driver", miss if not has_gpu else "fail", f"not found ({info.get('nvml_error') or 'NVML unavailable'})"
            )
        )
    if gpus:
        for g in gpus:
            out.append(
                StackCheck(
                    f"GPU {g.get('index')}",
                    "pass",
                    f"{g.get('name')}, {int(g.get('total') or 0) / 2**20:,.0f} MiB, compute capability "
                    f"{g.get('capability')}",
                )
            )
    else:
        out.append(StackCheck("GPUs", miss, "none visible"))
    for k in info.get("kernels") or []:
        ok = k.get("fp32") and "error" not in k
        out.append(
            StackCheck(
                f"GPU {k.get('index')} kernel",
                "pass" if ok else "fail",
                "a matmul ran" if ok else f"a matmul failed: {k.get('error', 'wrong result')}",
            )
        )
    if not has_gpu:
        out.append(StackCheck("bf16", miss if needs.bf16 else "n/a", "not applicable without a GPU"))
    else:
        sup = bool(info.get("bf16"))
        ran = all(k.get("bf16", True) for k in info.get("kernels") or [])
        ok = sup and ran
        out.append(
            StackCheck(
                "bf16",
                "pass" if ok else ("fail" if needs.bf16 else "absent"),
                ("supported, a bf16 matmul ran" if ok else "not supported on this GPU")
                + (" (the campaign trains in bf16)" if needs.bf16 else ""),
            )
        )
    nccl = bool(info.get("nccl"))
    out.append(
        StackCheck(
            "NCCL",
            "pass" if nccl else ("fail" if needs.nccl and needs.gpu else ("absent" if has_gpu else "n/a")),
            ("available" if nccl else "not available")
            + (" (the campaign uses several GPUs per run)" if needs.nccl else "")
            + ("" if nccl or has_gpu else ": no GPU; gloo " + ("available" if info.get("gloo") else "missing")),
        )
    )
    for e in info.get("extensions", []):
        out.append(_ext(e))
    return out


def _ext(e: ExtensionImport) -> StackCheck:
    if e.get("ok"):
        return StackCheck(
            f"import {e['module']}", "pass", "imported" + (f" ({e['version']})" if e.get("version") else "")
        )
    return StackCheck(f"import {e['module']}", "fail", e.get("error", "import failed"))


def verdict(info: StackReport, its: list[StackCheck], needs: Needs) -> tuple[bool, str]:
    failed = [i for i in its if i.status == "fail"]
    has_gpu = bool(info.get("cuda_available")) and bool(info.get("gpus"))
    if info.get("torch_error"):
        return False, "FAIL: torch cannot be used on this machine: fix the install before any pilot."
    if not has_gpu and needs.gpu:
        why = (
            f"torch {info.get('torch')} is a {info.get('build')} build"
            if info.get("build") != "cuda"
            else "torch is a CUDA build but sees no GPU"
        )
        ext_fail = [i.name for i in failed if i.name.startswith("import ")]
        more = f" Also failed: {', '.join(ext_fail)}." if ext_fail else ""
        return False, (
            f"NO GPU on this machine ({why}; driver: {info.get('nvml_error') or 'not found'}). "
            "Pilots run here on the CPU with GPU counters recorded as absent; this machine cannot be "
            f"recommended for a GPU rental.{more}"
        )
    if failed:
        return False, f"FAIL: {', '.join(i.name for i in failed)}. A machine is recommended only once its stack passes."
    where = f"{len(info.get('gpus') or [])} x {(info.get('gpus') or [{}])[0].get('name')}" if has_gpu else "the CPU"
    return True, f"PASS: the stack can run this campaign on {where}."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "campaign",
        nargs="?",
        default=None,
        help="campaign folder or campaign.toml: also import its task's extensions, check bf16/NCCL if it needs them",
    )
    p.add_argument("--json", action="store_true", help="print the items and the raw stack as JSON")


def run(args: argparse.Namespace) -> int:
    needs = needs_of(nbm.load(args.campaign)) if args.campaign else Needs()
    info = probe(needs.extensions)
    its = items(info, needs)
    ok, line = verdict(info, its, needs)
    if args.json:
        print(
            json.dumps(
                {"ok": ok, "verdict": line, "items": [i.__dict__ for i in its], "stack": info}, indent=2, default=str
            )
        )
        return 0 if ok else 1
    mark = {"pass": "PASS", "fail": "FAIL", "absent": "absent", "n/a": "n/a"}
    width = max(len(i.name) for i in its)
    print(f"Stack check ({needs.source})")
    for i in its:
        print(f"  {mark[i.status]:<6}  {i.name:<{width}}  {i.detail}")
    print(line)
    return 0 if ok else 1
