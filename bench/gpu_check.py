"""Every GPU path of the pilot, the series and the TUI, measured in one go on a lent GPU (issue 29).

One run writes ``gpu_check.json`` (every figure), ``summary.txt`` (what it printed) and ``tui.txt`` (the TUI's
screens, rendered headless) to --out ($OUT on the device machine); copy the JSON to bench/results/ afterwards.
Sections, in the order they run (the most important first; a section that the time budget cannot hold is
recorded as skipped, never silently dropped):

- machine     nvidia-smi, torch and CUDA versions, the CUDA context NVML sees and torch does not, counter costs
- gpt2_pilot  a GPT-2-small-sized pilot (124M, bf16, microbatch 8, lengths 128..1024, fused AdamW): every
              phase's torch allocated, reserved, their peaks, NVML per GPU and what NVML holds beyond torch
- series      200 updates of that model with validation every 50: its real peaks against the pilot's
              worst-case step and its largest phase, and against forward-only sizing
- oom         real out-of-memory in the forward pass, the first optimizer step and validation: the phase,
              inputs and remedy Cockpit recorded for each
- variants    the memory variants' pilots (fp16 with its scaler, activation checkpointing, microbatch 4 x
              accumulation 2) side by side with the bf16 reference, and `cockpit compare`'s reading of them
- overhead    the sampler's achieved rate and CPU cost; bench/overhead.py's metered/bare step at the demo's width
              and at GPT-2's (target at most 1.02x)
- demo_pilot  the built-in demo campaign's pilot on the GPU
- probe       `cockpit probe` on a plain GPU training script (bench/gpu_script.py)
- estimate    `cockpit estimate` on the GPT-2 campaign against the pilot's measured phases
- tui         the TUI on the GPT-2 campaign, headless with the real NVML source: the pilot's run screen and the
              GPU screen, as text

Without CUDA (here, on a CPU machine) it rehearses: every section at toy sizes, the out-of-memory ones injected
through COCKPIT_INJECT (labelled so), so the script is known to run before device time is spent on it.

    python bench/gpu_check.py --out "$OUT"                 # on the GPU machine (bench/gpu_check.sh wraps it)
    python bench/gpu_check.py --rehearse --out /tmp/gc     # here
    python bench/gpu_check.py --sections series,oom        # only these
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
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # Cockpit from this working tree, not an installed copy (PYTHONPATH=. on the device)
sys.path.insert(0, str(ROOT / "bench"))
from gpu_summary import summarise  # noqa: E402

from cockpit.runs import CHECK_PHASES  # noqa: E402  (the phases Cockpit itself keeps out of a run's peak)

MIB = 2**20
H200_HAND = {"allocated_mib": 8300, "reserved_mib": 9242, "nvml_mib": 10672}  # issue 29: 200 updates, by hand


def has_cuda() -> bool:
    """Without creating a CUDA context in this process (it would show in every NVML reading of the runs)."""
    code = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


# --------------------------------------------------------------------------- campaigns


def gpt2_params(rehearse: bool) -> dict[str, Any]:
    if rehearse:
        return {
            "vocab": 512,
            "block": 64,
            "min_length": 16,
            "layers": 2,
            "heads": 2,
            "d": 64,
            "n_train": 64,
            "n_val": 16,
        }
    return {
        "vocab": 50304,
        "block": 1024,
        "min_length": 128,
        "layers": 12,
        "heads": 12,
        "d": 768,
        "n_train": 64,
        "n_val": 16,
        "fused": True,
    }


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def table(name: str, values: dict[str, Any]) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()) + "\n"


def write_gpt2(
    folder: Path,
    rehearse: bool,
    params: dict[str, Any] | None = None,
    batch: dict[str, Any] | None = None,
    overfit_steps: int = 100,
) -> Path:
    """The GPT-2-small campaign: tests/estimate/gpt_task.py at 124M, bf16, microbatch 8, 200 updates."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "tests" / "estimate" / "gpt_task.py", folder / "gpt_task.py")
    p = gpt2_params(rehearse) | (params or {})
    b = {"microbatch": 8, "accumulation": 1, "updates": 200, "eval_microbatch": 8} | (batch or {})
    text = (
        table(
            "campaign",
            {
                "name": folder.name,
                "question": "What does GPT-2 124M at microbatch 8 cost on this GPU?",
                "quality_metric": "val_loss",
                "higher_is_better": False,
            },
        )
        + table("task", {"entry": "gpt_task.py:task"})
        + table("task.params", p)
        + table("batch", b)
        + table("training", {"lr": 6e-4, "precision": "bf16", "grad_clip": 1.0})
        + table("validation", {"every_updates": 50})
        + table("pilot", {"overfit_examples": 8, "overfit_steps": overfit_steps})
        + '[[variants]]\nid = "bf16"\nreference = true\n\n'
        + '[[variants]]\nid = "fp16"\nkind = "memory"\nset = { precision = "fp16" }\n\n'
        + '[[variants]]\nid = "ckpt"\nkind = "memory"\nset = { activation_checkpointing = true }\n\n'
        + '[[variants]]\nid = "mb4x2"\nkind = "memory"\nset = { microbatch = 4, accumulation = 2 }\n'
    )
    (folder / "campaign.toml").write_text(text)
    return folder


def write_wide(folder: Path, rehearse: bool, total_bytes: int | None) -> Path:
    """bench/gpu_wide_task.py sized so weights and gradients take about 72 % of the GPU and AdamW's moments do not fit."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "bench" / "gpu_wide_task.py", folder / "gpu_wide_task.py")
    width = 4096
    rows = 1000 if rehearse or not total_bytes else int(0.36 * total_bytes / (4 * width))
    text = (
        table("campaign", {"name": folder.name, "question": "Does the first optimizer step fit?"})
        + table("task", {"entry": "gpu_wide_task.py:task"})
        + table("task.params", {"rows": rows, "width": width})
        + table("batch", {"microbatch": 8, "accumulation": 1, "updates": 10})
        + table("training", {"lr": 1e-3, "precision": "fp32"})
        + '[[variants]]\nid = "ref"\nreference = true\n'
    )
    (folder / "campaign.toml").write_text(text)
    return folder


# --------------------------------------------------------------------------- running Cockpit


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with the repository first on PYTHONPATH (carried wheels, e.g. /tmp/site, stay after it)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **(extra or {})}


def gpu_total_bytes() -> int | None:
    """GPU 0's memory through NVML (no CUDA context in this process)."""
    from cockpit import nvml

    lib = nvml.NVML
    handle = lib.handle(0) if lib.available and lib.device_count() else None
    m = lib.memory(handle) if handle is not None else None
    return m.total if m is not None else None


def cockpit(
    args: list[str], cwd: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = child_env(env)
    try:
        return subprocess.run(
            [sys.executable, "-m", "cockpit", *args],
            cwd=cwd or ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full,
        )
    except subprocess.TimeoutExpired as e:
        stop_runs()
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return subprocess.CompletedProcess(e.cmd, 124, out, f"timed out after {timeout:.0f} s")


def as_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    try:
        got = json.loads(proc.stdout)
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def mib(b: int | float | None) -> float | None:
    return None if b is None else round(b / MIB, 1)


def gate_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Per phase: torch's four counters, NVML per GPU, what NVML holds beyond torch's reserved, RSS, time."""
    from cockpit import events as ev

    rows = []
    for g in ev.gates(ev.read_events(run_dir / ev.EVENTS_FILE)):
        mem = g.get("mem") or {}
        t = mem.get("torch") or {}
        nvml = mem.get("nvml") or []
        base = mem.get("baseline") or {}
        used = [x["used"] for x in nvml]
        rows.append(
            {
                "phase": g["phase"],
                "verdict": g["verdict"],
                "duration_s": round(g.get("duration_s") or 0.0, 3),
                "allocated_mib": mib(t.get("allocated")),
                "reserved_mib": mib(t.get("reserved")),
                "peak_allocated_mib": mib(t.get("peak_allocated")),
                "peak_reserved_mib": mib(t.get("peak_reserved")),
                "nvml_used_mib": [mib(u) for u in used] or None,
                "nvml_beyond_reserved_mib": mib(used[0] - t["reserved"])
                if used and t.get("reserved") is not None
                else None,
                "baseline_nvml_mib": [mib(u) for u in base.get("nvml_used") or []] or None,
                "rss_peak_mib": mib(mem.get("rss_peak")),
                "inputs": g.get("inputs"),
                "message": (g.get("message") or "")[:400],
                # every check with its figure: what a GPU run measured that the CPU never did
                "checks": [
                    {
                        "name": ch["name"],
                        "ok": bool(ch.get("ok")),
                        "warn": bool(ch.get("warn")),
                        "na": bool(ch.get("na")),
                        "detail": ch["detail"][:300],
                    }
                    for ch in g.get("checks") or []
                ],
                "remedy": (g.get("remedy") or "")[:400],
            }
        )
    return rows


def pilot(folder: Path, *extra: str, env: dict[str, str] | None = None, timeout: float = 300) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = cockpit(["pilot", str(folder), "--json", *extra], timeout=timeout, env=env)
    summary = as_json(proc) or {}
    out: dict[str, Any] = {
        "exit_code": proc.returncode,
        "wall_s": round(time.perf_counter() - t0, 1),
        "status": summary.get("status"),
        "phase": summary.get("phase"),
        "stop_reason": summary.get("stop_reason"),
        "peak_mib": summary.get("peak_mib"),
        "peak_counter": summary.get("peak_counter"),
        "absent": summary.get("absent"),
    }
    if not summary:
        out["stderr"] = proc.stderr[-1500:]
    run_dir = summary.get("dir")
    if run_dir:
        rd = Path(run_dir) if Path(run_dir).is_absolute() else ROOT / run_dir
        out["run"] = summary.get("run")
        out["run_dir"] = str(rd)
        out["gates"] = gate_rows(rd)
    return out


def sizing(phase: str, phases: tuple[str, ...] | None) -> bool:
    """A phase whose memory sizes the long run: the named ones, or every phase but Cockpit's own checks."""
    return phase in phases if phases is not None else phase not in CHECK_PHASES


def peak_of(rows: list[dict[str, Any]], key: str, phases: tuple[str, ...] | None = None) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None and sizing(r["phase"], phases)]
    return max(vals) if vals else None


def nvml_peak(rows: list[dict[str, Any]], phases: tuple[str, ...] | None = None) -> float | None:
    """The largest of the phase-end NVML readings (a series' NVML peak is its largest 20 Hz sample instead)."""
    vals = [r["nvml_used_mib"][0] for r in rows if r.get("nvml_used_mib") and sizing(r["phase"], phases)]
    return max(vals) if vals else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


# --------------------------------------------------------------------------- sections


class OutOfTime(Exception):
    """Too little of the time budget is left to start another subprocess."""


WORK: list[Path] = []  # the check's work folder, for stop_runs after a timeout


def stop_runs() -> None:
    """Stop every run the check started that still runs: Cockpit detaches its runs (own session), so a timed-out
    command leaves its run going, holding GPU memory that later sections would measure."""
    for folder in WORK:
        for pj in folder.rglob("runs/r*/process.json"):
            rd = pj.parent
            subprocess.run(
                [sys.executable, "-m", "cockpit", "stop", str(rd.parent.parent), rd.name, "--grace", "2"],
                capture_output=True,
                timeout=30,
                env=child_env(),
            )


class Check:
    """What every section sees: where to work, how big to go, what earlier sections found."""

    def __init__(self, out: Path, work: Path, rehearse: bool, deadline: float):
        self.out, self.work, self.rehearse, self.deadline = out, work, rehearse, deadline
        self.results: dict[str, Any] = {}
        self.gpt2: Path | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def budget(self, want: float) -> float:
        """A subprocess timeout: what it wants, never past the deadline; under 30 s left, nothing more starts."""
        left = self.left()
        if left < 30:
            raise OutOfTime(f"out of time ({left:.0f} s of the budget left)")
        return min(want, left)

    def gpt2_dir(self) -> Path:
        if self.gpt2 is None:
            self.gpt2 = write_gpt2(self.work / "gpt2", self.rehearse)
        return self.gpt2


def inner(name: str, timeout: float = 120) -> dict[str, Any]:
    """One of bench/gpu_inner.py's measurements, in a child interpreter; its JSON."""
    try:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "gpu_inner.py"), name],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    got = as_json(proc)
    if got is None:
        return {"error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
    return got


def s_machine(c: Check) -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    r: dict[str, Any] = {}
    if smi:
        q = subprocess.run(
            [smi, "--query-gpu=name,memory.total,memory.used,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        r["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
    else:
        r["nvidia_smi"] = "absent"
    du = shutil.disk_usage(c.work)
    r["work_dir"] = str(c.work)
    r["work_free_gib"] = round(du.free / 2**30, 1)  # eight GPT-2 pilots write about 2 GB of checkpoint each
    r["cpus"] = os.cpu_count()
    r.update(inner("machine", c.budget(120)))
    return r


def s_gpt2_pilot(c: Check) -> dict[str, Any]:
    folder = c.gpt2_dir()
    r = pilot(folder, timeout=c.budget(240))
    rows = r.get("gates") or []
    r["peak_allocated_mib"] = peak_of(rows, "peak_allocated_mib")
    r["peak_reserved_mib"] = peak_of(rows, "peak_reserved_mib")
    r["nvml_peak_mib"] = nvml_peak(rows)
    r["worst_case_peak_allocated_mib"] = peak_of(rows, "peak_allocated_mib", ("worst_case",))
    # the forward gate's peak: one microbatch's forward with the gate's own checks (a causal-mask check runs two more
    # forward passes), what sizing from a forward pass alone would see
    r["forward_gate_peak_allocated_mib"] = peak_of(rows, "peak_allocated_mib", ("forward",))
    r["checks_peak_allocated_mib"] = peak_of(rows, "peak_allocated_mib", tuple(CHECK_PHASES))
    return r


def s_series(c: Check) -> dict[str, Any]:
    folder = c.gpt2_dir()
    t0 = time.perf_counter()
    proc = cockpit(
        [
            "series",
            str(folder),
            "--variants",
            "bf16",
            "--seeds",
            "0",
            "--without-pilot",
            "gpu check: the pilot's verdict is read beside it",
            "--json",
        ],
        timeout=c.budget(240),
    )
    r: dict[str, Any] = {"exit_code": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1)}
    got = as_json(proc)
    if got is None:
        r["stderr"] = proc.stderr[-1500:]
        r["stdout"] = proc.stdout[-1500:]
        return r
    r["summary"] = got
    train = sorted(p for p in (folder / "runs").iterdir() if p.is_dir() and (p / "metrics.json").exists())
    if not train:
        r["error"] = "no run with metrics.json"
        return r
    rd = train[-1]
    metrics = json.loads((rd / "metrics.json").read_text())
    peak = metrics.get("peak") or {}
    from cockpit import events as ev

    events = ev.read_events(rd / ev.EVENTS_FILE)
    nv = [s["nvml"][0]["used"] for s in ev.iter_kind(events, ev.SAMPLE) if s.get("nvml")]
    tr = [s["torch"] for s in ev.iter_kind(events, ev.SAMPLE) if s.get("torch")]
    steps = list(ev.iter_kind(events, ev.STEP))
    evals = list(ev.iter_kind(events, ev.EVAL))
    r.update(
        {
            "run": rd.name,
            "updates": len(steps),
            "evals": [e.get("step") for e in evals],
            "peak_allocated_mib": mib(peak.get("peak_allocated")),
            "peak_reserved_mib": mib(peak.get("peak_reserved")),
            "nvml_peak_mib": mib(max(nv)) if nv else None,
            "sampled_reserved_peak_mib": mib(max(t.get("reserved", 0) for t in tr)) if tr else None,
            "samples": sum(1 for _ in ev.iter_kind(events, ev.SAMPLE)),
            "ms_per_update_median": round(sorted(s.get("duration_s") or 0 for s in steps)[len(steps) // 2] * 1e3, 2)
            if steps
            else None,
            "gates": gate_rows(rd),
        }
    )
    p = c.results.get("gpt2_pilot") or {}
    r["vs_pilot"] = {
        "worst_case_allocated": ratio(p.get("worst_case_peak_allocated_mib"), r["peak_allocated_mib"]),
        "pilot_peak_allocated": ratio(p.get("peak_allocated_mib"), r["peak_allocated_mib"]),
        "pilot_peak_reserved": ratio(p.get("peak_reserved_mib"), r["peak_reserved_mib"]),
        "pilot_nvml_peak": ratio(p.get("nvml_peak_mib"), r["nvml_peak_mib"]),
        "forward_gate_allocated": ratio(p.get("forward_gate_peak_allocated_mib"), r["peak_allocated_mib"]),
        "cockpit_checks_allocated": ratio(p.get("checks_peak_allocated_mib"), r["peak_allocated_mib"]),
        "nvml_note": "pilot: the largest phase-end reading; series: the largest 20 Hz sample",
        "target": "pilot / series within 0.98..1.02",
    }
    r["hand_measured_h200"] = H200_HAND
    return r


def s_oom(c: Check) -> dict[str, Any]:
    total = (c.results.get("machine") or {}).get("total_bytes") or (None if c.rehearse else gpu_total_bytes())
    cases: dict[str, tuple[Path, list[str], str]] = {
        "forward": (
            write_gpt2(c.work / "oom-forward", c.rehearse, {"n_train": 1024}, overfit_steps=20),
            ["--set", "microbatch=512"],
            "forward",
        ),
        "first_step": (write_wide(c.work / "oom-step", c.rehearse, total), [], "update_first"),
        "validation": (
            write_gpt2(c.work / "oom-validation", c.rehearse, {"n_val": 1024}, {"eval_microbatch": 1024}, 20),
            [],
            "validation",
        ),
    }
    r: dict[str, Any] = {}
    for name, (folder, extra, expected) in cases.items():
        env = {"COCKPIT_INJECT": f"oom:{expected}"} if c.rehearse else None
        try:
            got = pilot(folder, *extra, env=env, timeout=c.budget(180))
        except OutOfTime as e:
            r[name] = {"skipped": str(e), "expected_phase": expected}
            continue
        rows = got.pop("gates", [])
        last = rows[-1] if rows else {}
        r[name] = {
            **got,
            "injected": c.rehearse,
            "expected_phase": expected,
            "recorded_phase": last.get("phase"),
            "verdict": last.get("verdict"),
            "inputs": last.get("inputs"),
            "message": last.get("message"),
            "remedy": last.get("remedy"),
            "peak_allocated_mib_before": peak_of(rows, "peak_allocated_mib"),
            "phases": [x["phase"] for x in rows],
        }
    return r


def s_variants(c: Check) -> dict[str, Any]:
    """The three memory variants' pilots at once: torch's counters are per process; NVML, per GPU, is shared."""
    folder = c.gpt2_dir()
    procs = {}
    for v in ("fp16", "ckpt", "mb4x2"):
        procs[v] = subprocess.Popen(
            [sys.executable, "-m", "cockpit", "pilot", str(folder), "--variant", v, "--json"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
    r: dict[str, Any] = {
        "nvml_note": "the three variants ran at once: NVML per GPU is their sum, torch's counters are each process's own"
    }
    ref = c.results.get("gpt2_pilot") or {}
    for v, p in procs.items():
        try:
            out, err = p.communicate(timeout=c.budget(240))
        except (subprocess.TimeoutExpired, OutOfTime):
            p.kill()
            stop_runs()
            out, err = p.communicate()
        summary = as_json(subprocess.CompletedProcess(p.args, p.returncode, out, err)) or {}
        rows = gate_rows(Path(summary["dir"])) if summary.get("dir") else []
        pa, pr = peak_of(rows, "peak_allocated_mib"), peak_of(rows, "peak_reserved_mib")
        r[v] = {
            "status": summary.get("status"),
            "stop_reason": summary.get("stop_reason"),
            "exit_code": p.returncode,
            "peak_allocated_mib": pa,
            "peak_reserved_mib": pr,
            "vs_bf16_allocated": ratio(pa, ref.get("peak_allocated_mib")),
            "vs_bf16_reserved": ratio(pr, ref.get("peak_reserved_mib")),
            "per_phase_peak_allocated_mib": {x["phase"]: x["peak_allocated_mib"] for x in rows},
        }
        if not summary:
            r[v]["stderr"] = err[-1500:]
    proc = cockpit(["compare", str(folder), "--json"], timeout=c.budget(60))
    got = as_json(proc)
    if got is None:
        r["compare"] = {"exit_code": proc.returncode, "stderr": proc.stderr[-800:]}
        return r
    side: dict[str, Any] = {}
    for v, m in (got.get("memory") or {}).items():
        phases = (m or {}).get("phases") or {}
        side[v] = {
            "run": m.get("run"),
            "peak_mib": mib(m.get("peak")),  # compare's own peak: its counter below, Cockpit's check phases left out
            "counter": m.get("counter") or sorted({str(x.get("counter")) for x in phases.values()}),
        }
    r["compare"] = {
        "memory": side,
        "flags": {v: [f.get("flag") for f in fl] for v, fl in (got.get("flags") or {}).items()},
    }
    return r


def s_overhead(c: Check) -> dict[str, Any]:
    r: dict[str, Any] = {"sampler": inner("sampler", c.budget(60))}
    dev = "cpu" if c.rehearse else "cuda"
    for name, extra in {"demo_width": [], "gpt2_width": ["--d-model", "768", "--microbatch", "8"]}.items():
        rounds, updates = ("3", "5") if c.rehearse else ("5", "30")
        cmd = [
            sys.executable,
            str(ROOT / "bench" / "overhead.py"),
            "--device",
            dev,
            "--rounds",
            rounds,
            "--updates",
            updates,
            *extra,
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=c.budget(150), env=child_env())
            text = proc.stdout
        except subprocess.TimeoutExpired:
            text = "timed out"
        except OutOfTime as e:
            r[name] = {"skipped": str(e)}
            continue
        line = next((x for x in text.splitlines() if x.startswith("overhead ratio")), "")
        r[name] = {
            "output": text[-1200:],
            "ratio": float(line.split(":")[1].split()[0]) if line else None,
            "target": 1.02,
        }
    return r


def s_demo_pilot(c: Check) -> dict[str, Any]:
    folder = c.work / "demo"  # campaigns/demo is made from the template on first use and ignored by git
    made = cockpit(["new", "demo", "--example", "demo", "--dir", str(c.work)], timeout=c.budget(60))
    if made.returncode != 0:
        return {"error": f"cockpit new demo --example demo: exit {made.returncode}: {made.stderr[-800:]}"}
    r = pilot(folder, timeout=c.budget(180))
    rows = r.get("gates") or []
    r["peak_allocated_mib"] = peak_of(rows, "peak_allocated_mib")
    r["nvml_peak_mib"] = nvml_peak(rows)
    return r


def s_probe(c: Check) -> dict[str, Any]:
    where = c.work / "probe"
    where.mkdir(exist_ok=True)
    script = [sys.executable, str(ROOT / "bench" / "gpu_script.py"), "--out", str(where / "out")]
    if c.rehearse:
        script += ["--width", "64", "--layers", "2", "--block", "32", "--vocab", "256", "--batch-size", "4"]
    t0 = time.perf_counter()
    proc = cockpit(["probe", "--json", "--", *script], cwd=where, timeout=c.budget(180))
    r: dict[str, Any] = {"exit_code": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1)}
    got = as_json(proc)
    if got is None:
        r["stderr"] = proc.stderr[-1500:]
        return r
    r.update(
        {k: got.get(k) for k in ("status", "stop_reason", "phase", "peak_mib", "peak_counter", "findings", "absent")}
    )
    rd = Path(got["dir"]) if Path(got["dir"]).is_absolute() else where / got["dir"]
    r["gates"] = gate_rows(rd)
    return r


def s_estimate(c: Check) -> dict[str, Any]:
    folder = c.gpt2_dir()
    t0 = time.perf_counter()
    proc = cockpit(["estimate", str(folder), "--json", "--no-table"], timeout=c.budget(180))
    r: dict[str, Any] = {"exit_code": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1)}
    got = as_json(proc)
    if got is None:
        r["stderr"] = proc.stderr[-1500:]
        return r
    measured = {x["phase"]: x for x in (c.results.get("gpt2_pilot") or {}).get("gates") or []}
    rows = []
    for p in got.get("phases") or []:
        m = measured.get(p["name"]) or {}
        rows.append(
            {
                "phase": p["name"],
                "predicted_allocated_mib": p.get("allocated_mib"),
                "measured_peak_allocated_mib": m.get("peak_allocated_mib"),
                "allocated_ratio": ratio(p.get("allocated_mib"), m.get("peak_allocated_mib")),
                "predicted_reserved_mib": p.get("reserved_mib"),
                "measured_peak_reserved_mib": m.get("peak_reserved_mib"),
                "reserved_ratio": ratio(p.get("reserved_mib"), m.get("peak_reserved_mib")),
                "predicted_nvml_mib": p.get("nvml_mib"),
                "measured_nvml_mib": (m.get("nvml_used_mib") or [None])[0],
            }
        )
    pilot_peak = (c.results.get("gpt2_pilot") or {}).get("peak_allocated_mib")
    series_peak = (c.results.get("series") or {}).get("peak_allocated_mib")
    r.update(
        {
            "phases": rows,
            "predicted_peak_allocated_mib": got.get("peak_allocated_mib"),
            "predicted_peak_phase": got.get("peak_phase"),
            "vs_pilot_peak": ratio(got.get("peak_allocated_mib"), pilot_peak),
            "vs_series_peak": ratio(got.get("peak_allocated_mib"), series_peak),
            "tracing_s": got.get("seconds"),
        }
    )
    return r


def s_tui(c: Check) -> dict[str, Any]:
    run = (c.results.get("gpt2_pilot") or {}).get("run")
    if not run:
        return {"skipped": "no GPT-2 pilot run to show"}
    out = c.out / "tui.txt"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_inner.py"), "tui", str(c.gpt2_dir()), run, str(out)],
        capture_output=True,
        text=True,
        timeout=c.budget(90),
        env=child_env(),
    )
    got = as_json(proc) or {"error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
    got["file"] = out.name
    return got


SECTIONS: dict[str, Callable[[Check], dict[str, Any]]] = {
    "machine": s_machine,
    "gpt2_pilot": s_gpt2_pilot,
    "series": s_series,
    "oom": s_oom,
    "variants": s_variants,
    "tui": s_tui,
    "overhead": s_overhead,
    "demo_pilot": s_demo_pilot,
    "probe": s_probe,
    "estimate": s_estimate,  # last: it traces on the CPU, so it can also be compared with the JSON afterwards
}


# --------------------------------------------------------------------------- the summary


def save(out: Path, res: dict[str, Any]) -> list[str]:
    (out / "gpu_check.json").write_text(json.dumps(res, indent=1, default=str))
    try:
        lines = summarise(res)
    except Exception:  # noqa: BLE001 - the JSON is written; a summary bug must not lose the run
        lines = ["summary failed:", traceback.format_exc()[-1500:]]
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/gpu_check")
    ap.add_argument("--rehearse", action="store_true", help="toy sizes and injected OOMs (the default without CUDA)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="sections that would start after this are skipped")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of: {', '.join(SECTIONS)}")
    ap.add_argument("--require-cuda", action="store_true", help="exit at once where CUDA is missing (on the GPU box)")
    args = ap.parse_args()
    wanted = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; use {', '.join(SECTIONS)}")
    cuda = has_cuda()
    if args.require_cuda and not cuda:
        print("gpu check: CUDA is not available to this python3 (torch.cuda.is_available() is False); nothing ran")
        return 1
    rehearse = args.rehearse or not cuda
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    WORK.append(work)
    start = time.monotonic()
    c = Check(out, work, rehearse, start + args.budget_s)
    res: dict[str, Any] = {
        "rehearsal": rehearse,
        "cuda": cuda,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "budget_s": args.budget_s,
        "sections": c.results,
    }
    for name in wanted:
        if c.left() <= 0:
            c.results[name] = {"skipped": f"out of time (budget {args.budget_s:.0f} s)"}
            continue
        t0 = time.perf_counter()
        print(f"== {name} ({c.left():.0f} s left)", flush=True)
        try:
            c.results[name] = SECTIONS[name](c)
        except OutOfTime as e:
            c.results[name] = {"skipped": str(e)}
        except Exception:  # noqa: BLE001 - one section's failure is recorded; the others still run
            c.results[name] = {"error": traceback.format_exc()[-2500:]}
        c.results[name]["seconds"] = round(time.perf_counter() - t0, 1)
        res["seconds"] = round(time.monotonic() - start, 1)
        save(out, res)  # after every section: a run cut short still leaves its figures and summary
    res["seconds"] = round(time.monotonic() - start, 1)
    lines = save(out, res)
    print("\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
