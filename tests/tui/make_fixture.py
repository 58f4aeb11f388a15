"""Write the recorded campaign the TUI tests run against: ``tests/tui/fixtures/demo``.

Synthetic but shaped like a real pilot of campaigns/demo on one 24 GB GPU:
r0001 passes every phase (one warning), sampled at 20 Hz, with steps, logs
and inspected examples; r0002 ran on CPU and crashed during the backward
phase (no final event, no process). r0003-r0010 are a series (kind "train")
of the three learning rates on the CPU, shaped like ``cockpit series``
writes them: events (run_start, a step per update, an eval every 50 updates,
RSS samples at 1 Hz, run_end), curve.csv, evals.csv, metrics.json and
predictions.jsonl; r0009 (lr2e-4 seed 1) diverges near update 80 and keeps
its curve and its one validation point; lr2e-4 has no seed 2. r0011 is the
passed pilot of the memory variant len24 (max_length 24), whose data gate
counts examples that lose target tokens. Timestamps are
fixed so snapshots are stable. Run ``python tests/tui/make_fixture.py`` to
regenerate.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import random
import shutil
from pathlib import Path

import tomli_w

from cockpit import events as ev
from cockpit import notebook as nbm

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
OUT = HERE / "fixtures" / "demo"
T0 = 1767261600.0  # 2026-01-01 10:00:00 UTC
MIB = 2**20
GPU_TOTAL = 23034 * MIB
CONTEXT = 621 * MIB

# phase -> (duration s, peak reserved MiB, peak allocated MiB, inputs, checks, verdict, remedy)
PLAN = {
    "stack": (
        0.8,
        0,
        0,
        {},
        [("torch imports", True, "torch 2.11.0+cu128"), ("CUDA available", True, "NVIDIA L4, driver 570.86")],
        "pass",
        "",
    ),
    "data": (
        1.2,
        0,
        0,
        {"split": "train", "examples": 3200},
        [
            ("ids unique", True, "3392 ids, no duplicates"),
            ("targets in range", True, "vocab 96"),
            ("lengths", True, "3 of 3200 examples cropped at max_length 48", True),
            ("masks", True, "answer span only"),
        ],
        "warn",
        "check that cropping 3 long examples is intended",
    ),
    "leakage": (0.3, 0, 0, {"unit": "group"}, [("splits disjoint", True, "0 shared groups")], "pass", ""),
    "forward": (
        0.6,
        310,
        250,
        {"batch": "microbatch 2, longest 48"},
        [
            ("shapes", True, "logits 2x48x96"),
            ("finite loss", True, "4.57"),
            ("initial loss", True, "4.57 vs uniform 4.56"),
        ],
        "pass",
        "",
    ),
    "backward": (
        0.7,
        520,
        430,
        {"batch": "microbatch 2, longest 48"},
        [("finite gradients", True, "all 14 tensors"), ("frozen untouched", True, "none frozen")],
        "pass",
        "",
    ),
    "update_first": (
        0.5,
        610,
        540,
        {"batch": "update 1"},
        [("parameters changed", True, "14/14"), ("step counted", True, "1")],
        "pass",
        "",
    ),
    "update_second": (
        0.5,
        700,
        640,
        {"batch": "update 2"},
        [("parameters changed", True, "14/14"), ("optimizer state resident", True, "+90 MiB")],
        "pass",
        "",
    ),
    "accumulation": (
        1.5,
        700,
        640,
        {"accumulation": 8},
        [("accumulated == single batch", True, "rel diff 3e-7")],
        "pass",
        "",
    ),
    "worst_case": (
        0.9,
        1180,
        1010,
        {"batch": "microbatch 2 x length 48 (largest)"},
        [("full update fits", True, "peak 1180 MiB reserved")],
        "pass",
        "",
    ),
    "overfit": (
        3.0,
        720,
        650,
        {"examples": 16, "steps": 60},
        [("loss falls", True, "4.52 -> 0.31 (0.07x)")],
        "pass",
        "",
    ),
    "validation": (
        0.8,
        400,
        330,
        {"split": "val", "examples": 96},
        [("eval mode", True, "dropout off"), ("complete outputs", True, "96/96")],
        "pass",
        "",
    ),
    "save": (0.6, 400, 330, {}, [("checkpoint written", True, "1.9 MiB in 0.04 s")], "pass", ""),
    "resume": (
        2.0,
        700,
        640,
        {},
        [("state restored", True, "step 2, lr, rng"), ("next losses identical", True, "2 updates")],
        "pass",
        "",
    ),
    "export": (
        1.0,
        380,
        300,
        {},
        [("artifact written", True, "0.5 MiB"), ("reload replays controls", True, "8/8 identical")],
        "pass",
        "",
    ),
}


def line(event_kind: str, t: float, **payload) -> str:
    return (
        json.dumps({"v": ev.SCHEMA_VERSION, "t": round(t, 3), "kind": event_kind, **payload}, separators=(",", ":"))
        + "\n"
    )


def gpu_run(
    rdir: Path,
    rid: str = "r0001",
    variant: str = "lr1e-4",
    t0: float = T0,
    scale: float = 1.0,
    data_inputs: dict | None = None,
    truncation: dict | None = None,
) -> None:
    """A passed pilot on one L4; ``scale`` shrinks the memory peaks (a memory variant's pilot)."""
    out: list[str] = []
    t = t0
    out.append(
        line(
            ev.RUN_START,
            t,
            run_id=rid,
            campaign="demo",
            variant=variant,
            seed=0,
            run_kind="pilot",
            pid=4242,
            phases=list(ev.PHASES),
            params={"lr": 1e-4, "microbatch": 2, "accumulation": 8},
            stack={
                "python": "3.11.9",
                "torch": "2.11.0+cu128",
                "cuda": "12.8",
                "driver": "570.86",
                "gpus": [{"index": 0, "name": "NVIDIA L4", "total": GPU_TOTAL, "capability": "8.9"}],
            },
        )
    )
    out.append(line(ev.LOG, t + 0.01, level="info", message=f"pilot {rid}: 14 phases on NVIDIA L4 (22.5 GiB)"))
    step = 0
    prev_reserved = 0.0
    for phase, (dur, peak_r, peak_a, inputs, checks, verdict, remedy) in PLAN.items():
        peak_r, peak_a = int(peak_r * scale), int(peak_a * scale)
        extra = {}
        if phase == "data" and data_inputs is not None:
            inputs = {**inputs, **data_inputs}
            extra = {"truncation": truncation}
        out.append(line(ev.PHASE_START, t, phase=phase, inputs=inputs))
        out.append(line(ev.LOG, t + 0.005, level="info", message=f"phase {phase} started"))
        n = max(2, int(dur * 20))
        for i in range(n):
            ts = t + i / 20
            frac = math.sin(math.pi * (i + 1) / (n + 1))
            reserved = max(prev_reserved * 0.6, peak_r * (0.5 + 0.5 * frac)) * MIB if peak_r else 0.0
            alloc = reserved * (peak_a / peak_r) * (0.7 + 0.3 * frac) if peak_r else 0.0
            used = (CONTEXT + reserved) if phase != "stack" or i > n // 2 else 0.0
            out.append(
                line(
                    ev.SAMPLE,
                    ts,
                    phase=phase,
                    rss=int((1400 + 30 * frac) * MIB),
                    nvml=[{"index": 0, "used": int(used), "total": GPU_TOTAL, "util": int(80 * frac)}],
                    torch={"allocated": int(alloc), "reserved": int(reserved)},
                )
            )
        if phase in ("update_first", "update_second"):
            step += 1
            out.append(
                line(
                    ev.STEP,
                    t + dur * 0.8,
                    step=step,
                    loss=4.57 - 0.02 * step,
                    lr=1e-4,
                    grad_norm=1.9,
                    examples=16,
                    duration_s=0.021,
                    phase=phase,
                )
            )
        if phase == "overfit":
            for k in range(60):
                loss = 0.31 + 4.21 * math.exp(-k / 12) + 0.05 * math.sin(k)
                out.append(
                    line(
                        ev.STEP,
                        t + k * dur / 60,
                        step=k + 1,
                        loss=round(loss, 4),
                        lr=1e-3,
                        grad_norm=round(2.0 * math.exp(-k / 20), 3),
                        examples=16,
                        duration_s=0.018,
                        phase=phase,
                    )
                )
        if phase == "resume":
            for k in (3, 4):
                out.append(
                    line(
                        ev.STEP,
                        t + dur * k / 5,
                        step=k,
                        loss=4.51 - 0.01 * k,
                        lr=1e-4,
                        grad_norm=1.8,
                        examples=16,
                        duration_s=0.02,
                        phase=phase,
                    )
                )
        t += dur
        torch_mem = {
            "allocated": int(peak_a * 0.5 * MIB),
            "reserved": int(peak_r * MIB),
            "peak_allocated": int(peak_a * MIB),
            "peak_reserved": int(peak_r * MIB),
        }
        nv = [{"index": 0, "name": "NVIDIA L4", "used": int(CONTEXT + peak_r * MIB), "total": GPU_TOTAL}]
        out.append(
            line(
                ev.GATE,
                t,
                phase=phase,
                verdict=verdict,
                checks=[
                    {"name": c[0], "ok": c[1], "detail": c[2], **({"warn": True} if len(c) > 3 else {})} for c in checks
                ],
                inputs=inputs,
                remedy=remedy,
                message="" if verdict == "pass" else remedy,
                **extra,
                duration_s=dur,
                mem={
                    "torch": torch_mem,
                    "nvml": nv,
                    "rss": int(1420 * MIB),
                    "rss_peak": int(1430 * MIB),
                    "baseline": {"torch_allocated": 0, "nvml_used": [int(CONTEXT)], "rss": int(1400 * MIB)},
                },
            )
        )
        out.append(
            line(
                ev.LOG,
                t + 0.001,
                level="warning" if verdict == "warn" else "info",
                message=f"gate {phase}: {verdict} ({dur:.2f} s, peak {peak_r} MiB reserved)",
            )
        )
        prev_reserved = peak_r
        t += 0.05
    out.append(
        line(
            ev.RUN_END,
            t,
            status="passed",
            stop_reason="every gate passed (1 warning)",
            phase="export",
            message="pilot passed",
            exit_code=0,
            duration_s=round(t - t0, 3),
        )
    )
    (rdir / ev.EVENTS_FILE).write_text("".join(out))
    (rdir / "output.log").write_text(f"pilot {rid} on NVIDIA L4\n")
    (rdir / "inspect.json").write_text(json.dumps(inspect_doc(), indent=1))


def inspect_doc() -> dict:
    examples = []
    pairs = [("reverse abc", "cba"), ("sort dcab", "abcd"), ("upper hello", "HELLO"), ("count aaa", "3")]
    for i, (q, a) in enumerate(pairs):
        prompt, answer = f"Q: {q} A:", f" {a}"
        ids = [3 + (ord(c) % 90) for c in prompt + answer]
        n = len(ids)
        labels = [-100] * len(prompt) + ids[len(prompt) :]
        examples.append(
            {
                "split": "train" if i < 3 else "val",
                "id": f"ex{i:04d}",
                "row": {"input_ids": ids, "attention_mask": [1] * n, "labels": labels},
                "text": [[prompt, False], [answer, True]],
                "target": a,
                "label_name": None,
            }
        )
    return {"examples": examples, "class_counts": {}}


def cpu_crash(rdir: Path) -> None:
    out: list[str] = []
    t = T0 + 3600
    out.append(
        line(
            ev.RUN_START,
            t,
            run_id="r0002",
            campaign="demo",
            variant="lr2e-4",
            seed=1,
            run_kind="pilot",
            pid=5151,
            phases=list(ev.PHASES),
            params={"lr": 2e-4},
            stack={"python": "3.11.9", "torch": "2.11.0+cpu", "cuda": None, "driver": None, "gpus": []},
        )
    )
    for phase in ("stack", "data", "leakage", "forward", "backward"):
        out.append(line(ev.PHASE_START, t, phase=phase, inputs={}))
        for i in range(10):
            out.append(line(ev.SAMPLE, t + i / 20, phase=phase, rss=int((900 + 20 * i) * MIB), nvml=None, torch=None))
        t += 0.5
        if phase == "backward":
            out.append(line(ev.LOG, t, level="error", message="worker killed: out of host memory"))
            break
        out.append(
            line(
                ev.GATE,
                t,
                phase=phase,
                verdict="pass",
                checks=[{"name": "ok", "ok": True, "detail": "cpu"}],
                inputs={},
                remedy="",
                message="",
                duration_s=0.5,
                mem={
                    "torch": None,
                    "nvml": None,
                    "rss": int(1000 * MIB),
                    "rss_peak": int(1100 * MIB),
                    "baseline": {"torch_allocated": None, "nvml_used": [], "rss": int(900 * MIB)},
                },
            )
        )
    # A torn last line: the writer died mid-event.
    out.append('{"v":1,"t":%s,"kind":"sample","phase":"backw' % (t + 0.1))
    (rdir / ev.EVENTS_FILE).write_text("".join(out))
    (rdir / "output.log").write_text("Killed\n")


def run_toml(rdir: Path, rid: str, variant: str, seed: int, nb: nbm.Notebook, kind: str = "pilot") -> None:
    frozen = {
        "run": {
            "id": rid,
            "campaign": "demo",
            "variant": variant,
            "seed": seed,
            "kind": kind,
            "follows": "",
            "created": "2026-01-01T10:00:00+00:00",
        },
        "task": {"entry": "cockpit.tasks.tinylm:task", "extensions": []},
        "params": {k: v for k, v in nb.params(variant).items() if v is not None},
    }
    if kind == "train":  # a series run also freezes the stop rules and validation
        frozen["stop"] = {k: v for k, v in nb.stop.__dict__.items() if v is not None}
        frozen["validation"] = {k: v for k, v in nb.validation.__dict__.items() if v is not None}
    with open(rdir / "run.toml", "wb") as fh:
        tomli_w.dump(frozen, fh)


# ---- the series: (run id, variant, seed, learning rate, diverges at update)
SERIES = (
    ("r0003", "lr1e-4", 0, 1e-4, None),
    ("r0004", "lr1e-4", 1, 1e-4, None),
    ("r0005", "lr1e-4", 2, 1e-4, None),
    ("r0006", "lr5e-5", 0, 5e-5, None),
    ("r0007", "lr5e-5", 1, 5e-5, None),
    ("r0008", "lr5e-5", 2, 5e-5, None),
    ("r0009", "lr2e-4", 1, 2e-4, 83),
    ("r0010", "lr2e-4", 0, 2e-4, None),
)
SERIES_T0 = T0 + 7200
UPDATES, EVERY, STEP_S = 200, 50, 0.48
CPU_STACK = {
    "python": "3.11.7",
    "torch": "2.13.0+cpu",
    "build": "cpu",
    "cuda": None,
    "driver": None,
    "nvml": False,
    "nvml_error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found",
    "gpus": [],
    "device": "cpu",
    "cpu_count": 2,
    "memory_total": 25275990016,
}


def train_run(
    rdir: Path, nb: nbm.Notebook, rid: str, variant: str, seed: int, lr: float, diverge: int | None, t: float
) -> dict:
    """One series run; returns what its notebook row needs."""
    rng = random.Random(f"{variant}/{seed}")
    start_loss = 4.49 + rng.uniform(-0.02, 0.02)
    floor = 3.05 + rng.uniform(-0.03, 0.03)
    rate = lr / 1e-4 / 260  # a larger step falls faster within the budget

    def train_loss(k: int) -> float:
        return floor + (start_loss - floor) * math.exp(-rate * k) + rng.gauss(0, 0.04)

    def val_loss(k: int) -> float:
        return floor + 0.12 + (start_loss - floor) * math.exp(-rate * k) + rng.gauss(0, 0.01)

    out: list[str] = []
    params = {k: v for k, v in nb.params(variant).items() if v is not None}
    stop = {k: v for k, v in nb.stop.__dict__.items() if v is not None}
    out.append(
        line(
            ev.RUN_START,
            t,
            run_id=rid,
            campaign="demo",
            variant=variant,
            seed=seed,
            run_kind="train",
            follows="",
            pid=6000 + int(rid[1:]),
            phases=["train"],
            params=params,
            stop=stop,
            validation={"every_updates": EVERY, "notes": ""},
            stack=CPU_STACK,
            world=1,
        )
    )
    out.append(
        line(
            ev.PHASE_START,
            t + 0.9,
            phase="train",
            inputs={
                "updates": UPDATES,
                "microbatch": 2,
                "accumulation": 8,
                "precision": "fp32",
                "every_updates": EVERY,
            },
        )
    )
    out.append(
        line(
            ev.LOG,
            t + 0.9,
            level="info",
            message=(
                f"training {variant} seed {seed} for {UPDATES} updates (updates budget, 16 examples per update) on cpu; "
                f"validation every {EVERY} updates"
            ),
        )
    )
    curve = [("step", "loss", "lr", "grad_norm", "examples_seen", "elapsed_s")]
    evals = [("step", "val_loss", "token_accuracy", "exact_match")]
    t_train = t + 1.0
    status, reason, done = "completed", f"budget reached: {UPDATES} updates", UPDATES
    best: tuple[float, int] | None = None
    last_eval: dict = {}
    next_sample = t + 1.0
    rss = 246 * MIB
    for k in range(1, UPDATES + 1):
        ts = t_train + k * STEP_S
        while next_sample <= ts:
            rss = min(rss + 1.2 * MIB, 323 * MIB)
            out.append(line(ev.SAMPLE, next_sample, phase="train", rss=int(rss), nvml=None, torch=None))
            next_sample += 1.0
        loss = train_loss(k)
        if diverge is not None and k > diverge - 12:
            loss = loss * math.exp(0.16 * (k - diverge + 12))  # the larger step blows up
        grad = 0.9 * math.exp(-k / 300) + rng.uniform(0, 0.05) + (0 if diverge is None or k <= diverge - 12 else k / 10)
        out.append(
            line(
                ev.STEP,
                ts,
                step=k,
                loss=round(loss, 6),
                lr=lr,
                grad_norm=round(grad, 6),
                examples=16,
                duration_s=round(STEP_S + rng.uniform(-0.03, 0.03), 4),
                phase="train",
            )
        )
        curve.append((k, repr(round(loss, 6)), repr(lr), repr(round(grad, 6)), 16 * k, round(k * STEP_S, 4)))
        if diverge is not None and loss > 4.0 * start_loss:
            status, done = "diverged", k
            reason = f"diverged: loss {loss:.4g} at update {k} is above 4 x its starting value {start_loss:.4g}"
            break
        if k % EVERY == 0:
            v = val_loss(k)
            acc = round(0.02 + 0.08 * (start_loss - v) / (start_loss - floor), 6)
            out.append(
                line(
                    ev.EVAL,
                    ts + 0.6,
                    step=k,
                    loss=round(v, 6),
                    metrics={"token_accuracy": acc, "exact_match": 0.0},
                    duration_s=0.6,
                    examples=96,
                )
            )
            evals.append((k, repr(round(v, 6)), repr(acc), "0.0"))
            last_eval = {"step": k, "val_loss": round(v, 6), "token_accuracy": acc, "exact_match": 0.0}
            if best is None or v < best[0]:
                best = (round(v, 6), k)
            t_train += 0.6
    end_t = t_train + done * STEP_S + 0.3
    duration = round(end_t - t, 3)
    out.append(
        line(
            ev.RUN_END,
            end_t,
            status=status,
            stop_reason=reason,
            phase="train",
            message=reason,
            exit_code=0 if status == "completed" else 5,
            duration_s=duration,
            updates=done,
            mem={"torch": None, "nvml": None, "rss": int(rss), "rss_peak": int(rss), "baseline": None},
        )
    )
    (rdir / ev.EVENTS_FILE).write_text("".join(out))
    for name, rows in (("curve.csv", curve), ("evals.csv", evals if len(evals) > 1 else [])):
        if rows:
            with open(rdir / name, "w", newline="", encoding="utf-8") as fh:
                csv.writer(fh).writerows(rows)
    metrics = {
        "final_val_loss": last_eval.get("val_loss"),
        "best_val_loss": best[0] if best else None,
        "best_step": best[1] if best else None,
        "updates": done,
        "stop_reason": reason,
        "status": status,
        "step_time_s": STEP_S,
        "eval_time_s": 0.6,
        "save_time_s": 0.08,
        "examples_seen": 16 * done,
        "seed": seed,
        "variant": variant,
        "planned_updates": UPDATES,
        "final_step": last_eval.get("step"),
        "final_metrics": {k: v for k, v in last_eval.items() if k not in ("step", "val_loss")},
        "start_loss": round(start_loss, 6),
        "duration_s": duration,
        "peak": {
            "peak_allocated": None,
            "peak_reserved": None,
            "rss_peak": int(rss),
            "counter": "process RSS (no GPU)",
        },
    }
    (rdir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if status == "completed":
        with open(rdir / "predictions.jsonl", "w", encoding="utf-8") as fh:
            for i in range(4):
                fh.write(
                    json.dumps(
                        {"step": done, "id": f"val{i:04d}", "target": "cba", "prediction": "cbb", "correct": False}
                    )
                    + "\n"
                )
    (rdir / "output.log").write_text(f"[info] training {variant} seed {seed}\n")
    return {"status": status, "reason": reason, "updates": done, "start": t, "end": end_t, "duration": duration}


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "runs").mkdir(parents=True)
    nb = nbm.parse((ROOT / "cockpit" / "templates" / "demo.toml").read_text())
    nb.runs = [
        nbm.RunRow(
            id="r0001",
            variant="lr1e-4",
            seed=0,
            status="passed",
            stop_reason="every gate passed (1 warning)",
            phase="export",
            started="2026-01-01T10:00:00+00:00",
            ended="2026-01-01T10:00:15+00:00",
            peak_mib=1180.0,
            duration_s=15.1,
        ),
        nbm.RunRow(id="r0002", variant="lr2e-4", seed=1, status="running"),
    ]
    # The demo's three learning rates (the demo may carry more variants; the fixture pins its own set).
    nb.variants = [v for v in nb.variants if v.id in ("lr1e-4", "lr5e-5", "lr2e-4")]
    nb.selection, nb.conclusion = nbm.Selection(), nbm.Conclusion()
    nb.variants.append(
        nbm.Variant(
            id="len24",
            differs="max_length 24",
            kind="memory",
            set={"max_length": 24},
            why="a shorter maximum length to fit a smaller GPU",
        )
    )
    nb.decisions = [
        nbm.Decision(
            date="2026-01-01", text="Pilot first on the reference before any series.", kind="decision", runs=["r0001"]
        )
    ]
    for rid, variant, seed, fn in (("r0001", "lr1e-4", 0, gpu_run), ("r0002", "lr2e-4", 1, cpu_crash)):
        rdir = OUT / "runs" / rid
        rdir.mkdir()
        run_toml(rdir, rid, variant, seed, nb)
        fn(rdir)
    nb.path = OUT / "campaign.toml"
    t = SERIES_T0
    for rid, variant, seed, lr, diverge in SERIES:
        rdir = OUT / "runs" / rid
        rdir.mkdir()
        run_toml(rdir, rid, variant, seed, nb, kind="train")
        got = train_run(rdir, nb, rid, variant, seed, lr, diverge, t)
        iso = lambda x: _dt.datetime.fromtimestamp(x, _dt.timezone.utc).isoformat(timespec="seconds")  # noqa: E731
        nb.runs.append(
            nbm.RunRow(
                id=rid,
                variant=variant,
                seed=seed,
                kind="train",
                status=got["status"],
                stop_reason=got["reason"],
                phase="train",
                started=iso(got["start"]),
                ended=iso(got["end"]),
                duration_s=round(got["duration"], 2),
            )
        )
        t = got["end"] + 5.0
    # The memory variant's pilot: half the peaks, but a shorter max_length cuts targets (compare flags it).
    rdir = OUT / "runs" / "r0011"
    rdir.mkdir()
    run_toml(rdir, "r0011", "len24", 0, nb)
    trunc = {
        "max_length": 24,
        "examples": 3200,
        "lose_target_tokens": 412,
        "no_target_left": 37,
        "longer_than_max": 590,
    }
    gpu_run(rdir, "r0011", "len24", t + 60, scale=0.55, data_inputs={"max_length": 24}, truncation=trunc)
    nb.runs.append(
        nbm.RunRow(
            id="r0011",
            variant="len24",
            seed=0,
            status="passed",
            stop_reason="every gate passed (1 warning)",
            phase="export",
            peak_mib=649.0,
            duration_s=15.1,
        )
    )
    (OUT / "campaign.toml").write_text(nbm.dumps(nb))


if __name__ == "__main__":
    main()
