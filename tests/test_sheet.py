"""The selection sheet: from a real CPU pilot (GPU not measured) and from GPU figures written by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit import sheet as sh
from cockpit.cli import main
from tests.fake_runs import gpu_stack, make_campaign, piloted_copy, series_run, standard_gates, write_run

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


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    """The demo campaign (small data) after one real pilot on this machine's CPU."""
    return piloted_copy(tmp_path_factory.mktemp("sheet"))


@pytest.mark.slow  # after a real pilot
def test_cpu_pilot_sheet_says_gpu_not_measured_and_gives_rss(real: Path) -> None:
    proc = cockpit("sheet", str(real))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "GPU memory not measured" in out
    assert "process RSS peaked at" in out and "(host memory, not GPU memory)" in out
    assert "fits: unknown for 24 GB, 40 GB, 48 GB, 80 GB, 141 GB" in out
    assert "recommended: none: no GPU memory was measured" in out
    assert "microbatch 2 x length" in out  # the worst case's dimensions, from its gate inputs
    s = sh.build(nbm.load(real))
    assert s.measured_gpu is False and s.need_mib is None and s.peak_reserved_mib is None
    assert all(f.fits is None for f in s.fits)
    assert s.rss_peak_mib and s.rss_peak_mib > 50 and s.rss_phase
    assert s.precision == "fp32" and s.microbatch == 2 and s.accumulation == 8 and s.strategy == "one GPU"
    assert "not measured yet" in s.expected_result and "goal, not a prediction" in s.expected_result


@pytest.mark.slow  # after a real pilot
def test_write_stores_the_sheet_in_the_notebook_without_a_gpu_figure(real: Path) -> None:
    assert main(["sheet", str(real), "--write"]) == 0
    sel = nbm.load(real).selection
    assert sel.memory_per_gpu_mib is None  # never a number for a GPU that was not measured
    assert sel.gpu.startswith("not chosen: GPU memory not measured")
    assert sel.precision == "fp32" and sel.microbatch == 2 and sel.strategy == "one GPU"
    assert "length" in sel.max_dimensions and "CPU pilot" in sel.notes


@pytest.mark.slow  # after a real pilot
def test_sheet_plan_and_report_do_not_import_torch(real: Path) -> None:
    code = (
        "import sys, contextlib, io\nfrom cockpit.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    codes = [main(['sheet', {str(real)!r}]), main(['plan', {str(real)!r}]), main(['report', {str(real)!r}])]\n"
        "print(codes, 'torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[0,", "0,", "0]", "False"]
    report = (real / "report" / "report.md").read_text()
    assert "GPU memory was not measured on this machine" in report


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


@pytest.mark.slow  # after a real pilot
def test_json_output(real: Path) -> None:
    proc = cockpit("sheet", str(real), "--json")
    data = json.loads(proc.stdout)
    assert data["measured_gpu"] is False and data["need_mib"] is None
