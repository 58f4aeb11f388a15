"""bench/gpu_check.py, rehearsed on the CPU: the one-shot GPU check must run the first time a session is lent a GPU
(it has about 15 minutes of device time, no second chance), so its plumbing is tested here at toy sizes. The
out-of-memory cases are injected on the CPU (and labelled so); on a GPU they are real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # four pilots of a toy GPT and the TUI headless, in child processes (about a minute on 2 CPUs)
def test_the_gpu_check_rehearses_its_pilot_oom_and_tui_sections(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--rehearse", "--out", str(tmp_path)]
    proc = subprocess.run(
        [*cmd, "--sections", "machine,gpt2_pilot,oom,tui"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    s = res["sections"]
    assert res["rehearsal"] is True
    assert not [k for k, v in s.items() if v.get("error") or v.get("skipped")], s
    pilot = s["gpt2_pilot"]
    assert pilot["status"] == "passed", pilot.get("stop_reason")
    assert [g["phase"] for g in pilot["gates"]][:4] == ["stack", "data", "leakage", "forward"]
    forward = next(g for g in pilot["gates"] if g["phase"] == "forward")
    # no GPU: the torch and NVML counters are absent, never zero; RSS is measured
    assert forward["peak_allocated_mib"] is None and forward["nvml_used_mib"] is None and forward["rss_peak_mib"] > 0
    for name, expected in {"forward": "forward", "first_step": "update_first", "validation": "validation"}.items():
        o = s["oom"][name]
        assert (o["status"], o["recorded_phase"], o["injected"]) == ("oom", expected, True), o
        assert o["remedy"], o
    assert s["tui"]["shown"] == {"campaign": True, "run": True, "gpus": True}, s["tui"]
    text = (tmp_path / "tui.txt").read_text()
    assert "worst_case" in text and "no NVIDIA GPU" in text
    summary = (tmp_path / "summary.txt").read_text()
    assert "REHEARSAL" in summary and "oom validation  ok" in summary, summary
