"""A training run killed with SIGKILL at a random moment goes on from its last checkpoint as the same run,
and ends with the same curve as a run that was never interrupted (bit-identical on the CPU)."""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli_w

from cockpit import launch, runs
from cockpit import notebook as nbm
from tests.schema_check import off_schema

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]


def campaign(tmp: Path, name: str) -> Path:
    camp = tmp / "campaigns" / name
    camp.mkdir(parents=True)
    doc = {
        "campaign": {"name": name, "question": "does a killed run go on as if nothing happened?"},
        "task": {
            "entry": "cockpit.tasks.tinylm:task",
            "params": {
                "d_model": 32,
                "n_layers": 1,
                "n_heads": 2,
                "max_length": 48,
                "dropout": 0.1,
                "train_examples": 256,
                "val_examples": 32,
                "test_examples": 32,
            },
        },
        "batch": {"microbatch": 4, "accumulation": 2, "updates": 300, "eval_microbatch": 16},
        "training": {"lr": 1e-3, "device": "cpu", "grad_clip": 1.0},
        "variants": [{"id": "ref", "reference": True}],
        "stop": {"patience": 100},
        "validation": {"every_updates": 40},
        "checkpoints": {"every_updates": 25, "every_minutes": 0.0, "keep": 2},
    }
    (camp / "campaign.toml").write_text(tomli_w.dumps(doc), "utf-8")
    return camp


def curve(rdir: Path) -> list[tuple[str, ...]]:
    with open(rdir / runs.CURVE_FILE, newline="") as fh:
        return [(r["step"], r["loss"], r["lr"], r["grad_norm"], r["examples_seen"]) for r in csv.DictReader(fh)]


def evals(rdir: Path) -> list[dict[str, str]]:
    with open(rdir / runs.EVALS_FILE, newline="") as fh:
        return list(csv.DictReader(fh))


def test_sigkilled_run_resumes_as_the_same_run_with_the_same_curve(tmp_path: Path) -> None:
    env = {"OMP_NUM_THREADS": "1"}
    whole_camp, killed_camp = campaign(tmp_path, "whole"), campaign(tmp_path, "killed")
    _, whole = launch.new_run(whole_camp, None, 0, kind="train", env=env)
    rid, killed = launch.new_run(killed_camp, None, 0, kind="train", env=env)
    deadline = time.monotonic() + 300
    while not list((killed / runs.CHECKPOINTS_DIR).glob("update-*.pt")):
        assert runs.is_alive(killed), (killed / runs.LOG_FILE).read_text()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, 0.5))  # a random moment after the first checkpoint
    done = sorted(p.name for p in (killed / runs.CHECKPOINTS_DIR).glob("update-*.pt"))
    os.killpg(os.getpgid(runs.process_info(killed)["pid"]), signal.SIGKILL)
    assert launch.wait(killed, timeout=60)
    st = runs.state(killed)
    assert st.status == "crashed" and st.exit_code == 9, st
    lost_at = len(curve(killed))  # updates written before the kill

    out = subprocess.run(
        [sys.executable, "-m", "cockpit", "series", str(killed_camp), "--resume"],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, **env},
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert launch.wait(whole, timeout=400)

    st = runs.state(killed)
    assert st.status == "completed", (st.stop_reason, (killed / runs.LOG_FILE).read_text()[-3000:])
    start = [e for e in runs.read_events(killed) if e["kind"] == "run_start"]
    resumed_from = start[-1]["resumed_from"]
    assert len(start) == 2 and resumed_from >= int(done[-1][len("update-") : -len(".pt")])
    assert lost_at - resumed_from <= 25, "more than the updates since the last checkpoint were lost"
    assert curve(killed) == curve(whole)  # every update, bit-identical
    assert off_schema(killed) == [] and off_schema(whole) == []
    assert [(e["step"], e["val_loss"]) for e in evals(killed)] == [(e["step"], e["val_loss"]) for e in evals(whole)]
    row = nbm.load(killed_camp).run(rid)
    assert row.status == "completed" and f"from update {resumed_from}" in row.resumed
    assert not (killed / runs.CHECKPOINTS_DIR).exists()  # a completed run is not resumed: its periodic ones go


def test_only_stopped_or_crashed_training_runs_with_a_checkpoint_resume(tmp_path: Path) -> None:
    camp = campaign(tmp_path, "nothing")
    out = subprocess.run(
        [sys.executable, "-m", "cockpit", "series", str(camp), "--resume", "r0001"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 2 and "no training run r0001" in out.stderr
