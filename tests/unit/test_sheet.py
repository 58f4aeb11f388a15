"""The selection sheet: from a real CPU pilot (GPU not measured) and from GPU figures written by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit import sheet as sh
from cockpit.cli import main
from tests.fake_runs import gpu_stack, make_campaign, series_run, standard_gates, write_run

MIB = 2**20
# One real pilot runs in this module (about 20 s alone; minutes on a machine shared with other suites).
pytestmark = pytest.mark.timeout(900)


def cockpit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )


def _gpu_pilot(
    camp: Path,
    peak: float,
    worst: float,
    nvml_extra: float | None,
    variant: str | None = None,
    truncation: int | None = None,
) -> str:
    rid, _ = write_run(
        camp,
        variant=variant,
        stack=gpu_stack(),
        gates=standard_gates(peak, worst, nvml_extra, truncation=truncation),
        steps={"update_second": 0.5, "worst_case": 1.5},
    )
    return rid


def test_largest_size_does_not_fit(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    rid = _gpu_pilot(camp, peak=90_000, worst=150_000, nvml_extra=700)
    s = sh.build(nbm.load(camp))
    assert s.run_id == rid and s.measured_gpu and s.stack_passed
    assert s.peak_phase == "worst_case"  # the phase and input that peaked are named
    assert s.peak_reserved_mib == pytest.approx(150_000, abs=1)
    assert s.context_mib == pytest.approx(700, abs=1) and s.context_source.startswith("measured")
    assert s.need_mib == pytest.approx((150_000 + 700) * 1.1, abs=2)
    assert [f.fits for f in s.fits] == [False] * 5  # 141 GB = 134,468 MiB < 165,770 MiB
    text = "\n".join(sh.render(s))
    assert "fits: none; does not fit: 24 GB, 40 GB, 48 GB, 80 GB, 141 GB" in text
    assert "phase **worst_case**" in text and "lengths=4096 (x8)" in text and "cropped_to=4096" in text
    assert s.recommendation.startswith("none of 24 GB, 40 GB, 48 GB, 80 GB, 141 GB fits")
    main(["sheet", str(camp), "--write"])
    sel = nbm.load(camp).selection
    assert sel.gpu.startswith("none fits") and sel.memory_per_gpu_mib == pytest.approx(165_770, abs=2)


def test_smallest_fit_with_the_context_assumed_when_nvml_did_not_read(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    _gpu_pilot(camp, peak=20_000, worst=30_000, nvml_extra=None)
    s = sh.build(nbm.load(camp))
    assert s.context_mib == sh.ASSUMED_CONTEXT_MIB and s.context_source.startswith("assumed 621 MiB")
    need = (30_000 + 621) * 1.1  # 33,683 MiB: over 24 GB (22,888), under 40 GB (38,147)
    assert s.need_mib == pytest.approx(need, abs=1)
    assert [(f.size_gb, f.fits) for f in s.fits] == [(24, False), (40, True), (48, True), (80, True), (141, True)]
    assert s.recommendation.startswith("40 GB: the smallest common size")
    assert "assumed 621 MiB" in "\n".join(sh.render(s))


def test_a_variant_that_fits_only_after_truncation_is_not_the_same_experiment(tmp_path: Path) -> None:
    short = {"id": "short", "set": {"max_length": 24}, "differs": "max_length 24", "why": "memory", "kind": "memory"}
    camp = make_campaign(tmp_path, variants=[short])
    _gpu_pilot(camp, 20_000, 90_000, 600, truncation=0)
    _gpu_pilot(camp, 10_000, 30_000, 600, variant="short", truncation=37)
    nb = nbm.load(camp)
    ref = sh.build(nb)
    assert ref.same_experiment and not ref.truncation
    s = sh.build(nb, "short")
    assert s.same_experiment is False
    assert "NOT THE SAME EXPERIMENT" in s.truncation and "37 examples lose target tokens" in s.truncation
    assert "the reference loses none" in s.truncation
    assert sh.render(s)[2].startswith("**NOT THE SAME EXPERIMENT")


def test_expected_result_comes_from_series_runs_of_the_variant(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    _gpu_pilot(camp, 20_000, 30_000, 600)
    for seed, v in enumerate((1.9, 2.1, 1.95)):
        series_run(camp, "lr1e-4", seed, v)
    bad, _ = series_run(camp, "lr1e-4", 3, None, status="diverged", reason="diverged: loss 18 above 4 x 4.3")
    s = sh.build(nbm.load(camp))
    assert "mean 1.9833" in s.expected_result and "min 1.9000, max 2.1000" in s.expected_result
    assert "reached by 2 of 3 seeds" in s.expected_result  # target 2.0, lower is better
    assert f"not counted: {bad} diverged" in s.expected_result


def test_no_passed_pilot_is_a_clear_error(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    write_run(camp, gates=standard_gates(None, None)[:3], status="failed", reason="gate data failed")
    proc = cockpit("sheet", str(camp))
    assert proc.returncode == 2
    assert "no passed pilot of variant 'lr1e-4'" in proc.stderr and "gate data failed" in proc.stderr
    assert "Traceback" not in proc.stderr
