"""Verdicts that measure, on tiny tasks holding one kind of objective or one user mistake each (tests/verdict_tasks).

Each test runs the pilot's phases in this process (``Context.in_memory``) up to the phase that judges, or the
whole pilot as ``cockpit pilot`` runs it, and asserts the verdict and the words that name the cause.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import tomli_w
import tomllib

from cockpit import events as ev
from cockpit.pilot.context import Context
from cockpit.pilot.gate import Gate
from cockpit.pilot.phases import PHASES
from cockpit.pilot.pilot import run_phase
from cockpit.pilot.task import Task

ROOT = Path(__file__).resolve().parent.parent
TASKS = Path(__file__).resolve().parent / "verdict_tasks"
PARAMS = {"microbatch": 4, "accumulation": 2, "lr": 1e-2, "device": "cpu", "updates": 20, "eval_microbatch": 8}


def phases(
    task: Task, last: str, params: dict[str, Any] | None = None, pilot: dict[str, Any] | None = None
) -> dict[str, Gate]:
    """The phases in order up to ``last`` (or the first that ends the pilot); their gates by name."""
    ctx = Context.in_memory(task, {**PARAMS, **(params or {})}, pilot=pilot)
    gates: dict[str, Gate] = {}
    for phase in PHASES:
        g, ended = run_phase(ctx, phase)
        gates[phase.name] = g
        stops = ended is not None or (g.verdict == ev.Verdict.FAIL and not phase.independent)
        if phase.name == last or stops:
            return gates
    raise AssertionError(f"no phase {last}")


def check(g: Gate, name: str) -> dict[str, Any]:
    return next(c for c in g.checks if c["name"] == name)


def campaign(root: Path, entry: str, params: dict[str, Any] | None = None, **tables: dict[str, Any]) -> Path:
    """A campaign folder around ``entry``, from the demo's notebook with its runs left out."""
    data = tomllib.loads((ROOT / "campaigns" / "demo" / "campaign.toml").read_text())
    data.pop("runs", None)
    data.pop("decisions", None)
    data["variants"] = [v for v in data["variants"] if v.get("reference")]
    data["task"] = {"entry": entry, "extensions": [], "params": dict(params or {})}
    data["batch"].update({"microbatch": 4, "accumulation": 2, "eval_microbatch": 8})
    data["training"].update({"lr": 1e-2, "device": "cpu"})
    for name, values in tables.items():
        data.setdefault(name, {}).update(values)
    d = root / "camp"
    d.mkdir(parents=True)
    (d / "campaign.toml").write_text(tomli_w.dumps(data))
    return d


def pilot_cli(camp: Path) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "cockpit", "pilot", str(camp), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    return out.returncode, json.loads(out.stdout)


# --------------------------------------------------------------------------- 1. nothing trains


def test_a_reference_made_by_copy_copy_froze_the_policy_and_backward_says_so() -> None:
    from tests.verdict_tasks.frozen_policy import task

    gates = phases(task, "backward")
    assert gates["forward"].verdict.value == "pass", gates["forward"].checks
    g = gates["backward"]
    c = check(g, "parameters that train")
    assert g.verdict.value == "fail" and not c["ok"], g.checks
    for words in ("no parameter requires grad", "policy", "ref (shares its parameter tensors with policy", "copy.copy"):
        assert words in c["detail"], (words, c["detail"])


def test_nothing_to_train_ends_as_a_failed_gate_not_a_bug_in_cockpit(tmp_path: Path) -> None:
    code, out = pilot_cli(campaign(tmp_path, f"{TASKS / 'frozen_policy.py'}:task"))
    assert code == int(ev.ExitCode.GATE_FAILED), out
    assert out["status"] == "failed" and out["phase"] == "backward", out
    last = out["gates"][-1]
    assert last["phase"] == "backward" and last["verdict"] == "fail", last
