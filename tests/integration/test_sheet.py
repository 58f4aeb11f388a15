"""The selection sheet: from a real CPU pilot (GPU not measured) and from GPU figures written by hand: the tests that
start processes or load models (the rest: tests/unit/test_sheet.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit import sheet as sh
from cockpit.cli import main
from tests.fake_runs import piloted_copy
from tests.unit.test_sheet import cockpit


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


@pytest.mark.slow  # after a real pilot
def test_json_output(real: Path) -> None:
    proc = cockpit("sheet", str(real), "--json")
    data = json.loads(proc.stdout)
    assert data["measured_gpu"] is False and data["need_mib"] is None
