"""Run folders written by hand for the sheet, plan and report tests.

Each run is allocated by ``cockpit.runs.create_run`` (so its id and notebook
row are real), then given the events and files a pilot or a series run would
leave: run_start with a stack, gate events with memory figures, step events,
run_end; for series runs also metrics.json and curve.csv. Figures here are
test inputs, chosen to put the code on a known side of each threshold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tomli_w
import tomllib

from cockpit import events as ev
from cockpit import notebook as nbm
from cockpit import runs

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cockpit" / "templates" / "demo.toml"  # the built-in demo, as `cockpit new demo --example demo` writes it
MIB = 2**20


def make_campaign(root: Path, name: str = "demo", variants: list[dict[str, Any]] | None = None, **params: Any) -> Path:
    """A clean copy of the demo notebook: no runs, decisions or selection; small data."""
    data = tomllib.loads(DEMO.read_text("utf-8"))
    data["campaign"]["name"] = name
    for key in ("runs", "decisions", "selection", "rental", "conclusion"):
        data.pop(key, None)
    data["task"]["params"].update({"train_examples": 400, "val_examples": 32, "test_examples": 32})
    for k, v in params.items():
        for section in ("batch", "training"):
            if k in data[section]:
                data[section][k] = v
    if variants:
        data["variants"] += variants
    d = Path(root) / name
    d.mkdir(parents=True)
    (d / "campaign.toml").write_text(tomli_w.dumps(data), "utf-8")
    return d


def gpu_stack(name: str = "NVIDIA H200", total_mib: float = 143_771) -> dict[str, Any]:
    return {
        "python": "3.11.7",
        "torch": "2.11.0+cu128",
        "build": "cuda",
        "cuda": "12.8",
        "cuda_available": True,
        "driver": "570.124.06",
        "nvml": True,
        "gpus": [{"index": 0, "name": name, "total": int(total_mib * MIB), "capability": "9.0"}],
        "bf16": True,
        "nccl": True,
        "gloo": True,
        "device": "cuda:0",
    }


def cpu_stack() -> dict[str, Any]:
    return {
        "python": "3.11.7",
        "torch": "2.13.0+cpu",
        "build": "cpu",
        "cuda": None,
        "cuda_available": False,
        "driver": None,
        "nvml": False,
        "nvml_error": "NVMLError_LibraryNotFound",
        "gpus": [],
        "bf16": None,
        "nccl": False,
        "gloo": True,
        "device": "cpu",
    }


def mem(
    peak_reserved_mib: float | None = None,
    reserved_mib: float | None = None,
    nvml_used_mib: float | None = None,
    rss_mib: float = 300,
) -> dict[str, Any]:
    t = None
    if peak_reserved_mib is not None:
        r = reserved_mib if reserved_mib is not None else peak_reserved_mib
        t = {
            "allocated": int(r * 0.8 * MIB),
            "reserved": int(r * MIB),
            "peak_allocated": int(peak_reserved_mib * 0.9 * MIB),
            "peak_reserved": int(peak_reserved_mib * MIB),
        }
    nv = None
    if nvml_used_mib is not None:
        nv = [{"index": 0, "name": "NVIDIA H200", "used": int(nvml_used_mib * MIB), "total": int(143_771 * MIB)}]
    return {"torch": t, "nvml": nv, "rss": int(rss_mib * MIB), "rss_peak": int(rss_mib * MIB), "baseline": None}


def gate(
    phase: str,
    m: dict[str, Any],
    inputs: dict[str, Any] | None = None,
    duration_s: float = 0.1,
    verdict: str = "pass",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "phase": phase,
        "verdict": verdict,
        "checks": [{"name": "ok", "ok": True, "detail": "fabricated"}],
        "inputs": inputs or {},
        "remedy": "",
        "message": "",
        "duration_s": duration_s,
        "mem": m,
        **extra,
    }


def standard_gates(
    peak_mib: float | None,
    worst_mib: float | None,
    nvml_extra_mib: float | None = None,
    step_s: float = 0.5,
    truncation: int | None = None,
) -> list[dict[str, Any]]:
    """Every pilot phase; on a GPU (peak given) the worst case peaks at ``worst_mib``."""

    def m(p: float | None) -> dict[str, Any]:
        if p is None:
            return mem(rss_mib=300)
        return mem(p, p, p + nvml_extra_mib if nvml_extra_mib is not None else None)

    data_extra = {"truncation": {"examples": 400, "lose_target_tokens": truncation}} if truncation is not None else {}
    return [
        gate("stack", m(None if peak_mib is None else 0.0), {"device": "cuda:0" if peak_mib is not None else "cpu"}),
        gate("data", m(None if peak_mib is None else 0.0), {"microbatch": 8, "max_length": 4096}, **data_extra),
        gate("forward", m(peak_mib), {"microbatch": 8, "lengths": [900, 1200], "cropped_to": 4096}),
        gate("update_first", m(peak_mib), {"microbatch": 8}),
        gate("update_second", m(peak_mib), {"microbatch": 8, "lengths": [1000, 1100]}, duration_s=step_s),
        gate(
            "worst_case",
            m(worst_mib),
            {"accumulation": 4, "microbatch": 8, "lengths": [4096] * 8, "cropped_to": 4096},
            duration_s=step_s * 3,
        ),
        gate("validation", m(peak_mib), {"longest": 4096, "examples": 32, "eval_microbatch": 16}, duration_s=2.0),
        gate("save", m(peak_mib), {"step": 3}, duration_s=4.0),
        gate("export", m(peak_mib), {"controls": 4}, duration_s=6.0),
    ]


def write_run(
    campaign: Path,
    *,
    variant: str | None = None,
    seed: int = 0,
    kind: str = "pilot",
    stack: dict[str, Any] | None = None,
    gates: list[dict[str, Any]] | None = None,
    steps: dict[str, float] | None = None,
    status: str | None = "passed",
    reason: str = "every gate passed",
    metrics: dict[str, Any] | None = None,
    curve: list[tuple[int, float]] | None = None,
    follows: str = "",
    overrides: dict[str, Any] | None = None,
    evals: list[tuple[int, float]] | None = None,
) -> tuple[str, Path]:
    """A finished (or, with status None, crashed) run with the given events and files; ``evals``: (step, loss) of
    the evaluations it saw, after its gates."""
    rid, rdir = runs.create_run(campaign, variant, seed, kind=kind, follows=follows, overrides=overrides)
    nb = nbm.load(campaign)
    vid = variant or nb.reference.id
    w = ev.EventWriter(rdir / ev.EVENTS_FILE)
    w.emit(
        ev.RUN_START,
        run_id=rid,
        campaign=nb.campaign.name,
        variant=vid,
        seed=seed,
        run_kind=kind,
        pid=0,
        phases=list(ev.PHASES),
        params=nb.params(vid),
        stack=stack or cpu_stack(),
        world=1,
    )
    for g in gates or []:
        w.emit(ev.PHASE_START, phase=g["phase"], inputs=g.get("inputs", {}))
        if steps and g["phase"] in steps:
            w.emit(
                ev.STEP,
                step=1,
                loss=2.0,
                lr=1e-4,
                grad_norm=1.0,
                examples=16,
                phase=g["phase"],
                duration_s=steps[g["phase"]],
            )
        w.emit(ev.GATE, **g)
    for step, loss in evals or []:
        w.emit(ev.EVAL, step=step, loss=loss, metrics={}, duration_s=0.5, examples=32)
    if curve:
        with open(rdir / "curve.csv", "w", encoding="utf-8") as fh:
            fh.write("step,loss,lr,grad_norm,examples_seen,elapsed_s\n")
            for s, loss in curve:
                fh.write(f"{s},{loss},0.0001,1.0,{s * 16},{s * 0.1}\n")
    if metrics is not None:
        (rdir / "metrics.json").write_text(json.dumps({"seed": seed, "variant": vid, **metrics}), "utf-8")
    if status is not None:
        w.emit(
            ev.RUN_END,
            status=status,
            stop_reason=reason,
            phase=(gates or [{}])[-1].get("phase", "train"),
            message=reason,
            exit_code=0,
            duration_s=10.0,
        )
    else:  # crashed: a process record whose pid is gone, no run_end
        (rdir / runs.PROCESS_FILE).write_text(json.dumps({"pid": 2**22 + 12345, "create_time": 1.0}))
    w.close()
    runs.settle_run(campaign, rdir)
    return rid, rdir


def series_run(
    campaign: Path,
    variant: str,
    seed: int,
    final: float | None,
    *,
    status: str = "completed",
    reason: str = "budget reached: 200 updates",
    step_time_s: float = 0.05,
    updates: int = 200,
    eval_time_s: float = 0.5,
    save_time_s: float = 0.2,
    overrides: dict[str, Any] | None = None,
) -> tuple[str, Path]:
    start = 4.3
    end = final if final is not None else 20.0
    curve = [(s, start + (end - start) * s / updates) for s in range(1, updates + 1, max(1, updates // 20))]
    metrics = {
        "final_val_loss": final,
        "best_val_loss": final,
        "best_step": updates,
        "updates": updates,
        "stop_reason": reason,
        "status": status,
        "step_time_s": step_time_s,
        "eval_time_s": eval_time_s,
        "save_time_s": save_time_s,
        "examples_seen": updates * 16,
    }
    return write_run(
        campaign,
        variant=variant,
        seed=seed,
        kind="train",
        gates=[],
        status=status,
        reason=reason,
        metrics=metrics,
        curve=curve,
        overrides=overrides,
    )


_PILOTED: dict[str, Path] = {}


def piloted_copy(dest: Path) -> Path:
    """A copy, under ``dest``, of a small demo campaign after one real ``cockpit pilot`` on this CPU.

    The pilot runs once per test process (it is the slow part); every module gets
    its own copy of the folder, runs included, so no module sees another's writes.
    """
    import atexit
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    if "camp" not in _PILOTED:
        root = Path(tempfile.mkdtemp(prefix="cockpit-piloted-"))
        atexit.register(shutil.rmtree, root, True)
        camp = make_campaign(root)
        proc = subprocess.run(
            [sys.executable, "-m", "cockpit", "pilot", str(camp)],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"},
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        _PILOTED["camp"] = camp
    target = Path(dest) / "demo"
    shutil.copytree(_PILOTED["camp"], target, ignore=shutil.ignore_patterns(".campaign.lock"))
    return target
