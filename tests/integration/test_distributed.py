"""Distributed pilots on the CPU: torchrun, gloo, two ranks; a dead rank and a hung rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit import events as ev
from cockpit import runs
from tests.integration.test_pilot import make_campaign

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

ROOT = Path(__file__).resolve().parents[2]


def pilot(camp: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    full = {**os.environ, "COCKPIT_DIST_BACKEND": "gloo", **(env or {})}
    out = subprocess.run(
        [sys.executable, "-m", "cockpit", "pilot", str(camp), "--nproc", "2", "--json", *extra],
        capture_output=True,
        text=True,
        env=full,
        cwd=ROOT,
        timeout=600,
    )
    return out.returncode, json.loads(out.stdout)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    camp = make_campaign(tmp_path_factory.mktemp("dist"), "dist")
    return pilot(camp)


def test_two_ranks_pass_every_gate_side_by_side(two_ranks):
    code, data = two_ranks
    assert code == 0 and data["status"] == "passed", data["stop_reason"]
    gates = data["gates"]
    assert sorted({g["rank"] for g in gates}) == [0, 1]
    for phase in ev.PHASES:
        rows = [g for g in gates if g["phase"] == phase]
        assert len(rows) == 2 and all(g["verdict"] in ("pass", "warn") for g in rows), (phase, rows)
    assert "on all 2 ranks" in data["stop_reason"]


def test_cross_rank_checks_and_doubled_effective_batch(two_ranks):
    _, data = two_ranks
    first = [g for g in data["gates"] if g["phase"] == "update_first"]
    for g in first:
        checks = {c["name"]: c for c in g["checks"]}
        assert checks["parameters identical on every rank"]["ok"]
        assert checks["rank shards disjoint"]["ok"]
        assert "32 = 2 x 8 x 2 ranks" in checks["effective batch"]["detail"]
    second = [g for g in data["gates"] if g["phase"] == "update_second"]
    assert all(any(c["name"] == "parameters identical on every rank" and c["ok"] for c in g["checks"]) for g in second)
    save = {g["rank"]: g for g in data["gates"] if g["phase"] == "save"}
    assert any(c["name"] == "saved once, by rank 0" for c in save[1]["checks"])
    resume = [g for g in data["gates"] if g["phase"] == "resume"]
    for g in resume:  # resumed on every rank, each in a new process, bit-identical on the CPU
        check = next(c for c in g["checks"] if c["name"] == "next losses equal the uninterrupted run")
        assert check["ok"] and check["detail"].startswith("bit-identical")


def test_a_rank_that_dies_is_named(tmp_path):
    camp = make_campaign(tmp_path, "die")
    code, data = pilot(camp, env={"COCKPIT_INJECT": "die:update_second", "COCKPIT_INJECT_RANK": "1"})
    assert data["status"] == "crashed" and code == int(ev.ExitCode.RANK_FAILED)
    assert "rank 1 ended without a final event during phase update_second" in data["stop_reason"]
    nb_row = runs.settle(camp).runs[-1]
    assert nb_row.status == "crashed" and "rank 1" in nb_row.stop_reason


def test_a_rank_that_hangs_ends_the_run_by_timeout(tmp_path):
    camp = make_campaign(tmp_path, "hang")
    code, data = pilot(
        camp,
        env={"COCKPIT_INJECT": "sleep:update_second", "COCKPIT_INJECT_RANK": "1", "COCKPIT_COLLECTIVE_TIMEOUT_S": "15"},
    )
    assert code == int(ev.ExitCode.RANK_FAILED), data
    assert data["status"] == "error" and data["phase"] == "update_second"
    assert "rank 1 still inside phase update_second" in data["stop_reason"]
    assert "collective timeout" in data["stop_reason"]
