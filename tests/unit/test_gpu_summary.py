"""bench/gpu_summary.py on figures shaped as a GPU run gives them (numbers where the CPU rehearsal has none): the
summary printed at the end of the one-shot GPU check must not fail on the figures only a GPU produces."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from gpu_summary import summarise  # noqa: E402


def _gate(phase: str, alloc: float) -> dict[str, object]:
    return {
        "phase": phase,
        "verdict": "pass",
        "duration_s": 1.25,
        "allocated_mib": alloc,
        "reserved_mib": alloc * 1.1,
        "peak_allocated_mib": alloc * 1.5,
        "peak_reserved_mib": alloc * 1.6,
        "nvml_used_mib": [alloc * 1.7],
        "nvml_beyond_reserved_mib": 512.0,
        "checks": [
            {"name": "step restored", "ok": True, "detail": "step 9"},
            {"name": "next losses equal the uninterrupted run", "ok": phase != "worst_case", "detail": "differ: 1/2"},
        ],
    }


def test_a_gpu_shaped_result_is_summarised_with_its_ratios() -> None:
    res = {
        "rehearsal": False,
        "seconds": 402.5,
        "sections": {
            "machine": {"device": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0", "cuda_context_mib": 518.0},
            "gpt2_pilot": {
                "status": "passed",
                "wall_s": 61.0,
                "peak_allocated_mib": 8300.0,
                "gates": [_gate("forward", 3000.0), _gate("worst_case", 5533.3)],
            },
            "series": {
                "updates": 200,
                "evals": [50, 100, 150, 200],
                "peak_allocated_mib": 8300.0,
                "vs_pilot": {
                    "worst_case_allocated": 1.0,
                    "pilot_peak_allocated": 1.0,
                    "pilot_peak_reserved": 0.99,
                    "pilot_nvml_peak": 1.01,
                    "forward_gate_allocated": 0.44,
                    "cockpit_checks_allocated": 1.3,
                },
            },
            "oom": {
                "first_step": {
                    "status": "oom",
                    "recorded_phase": "update_first",
                    "expected_phase": "update_first",
                    "injected": False,
                    "inputs": {"microbatch": 8},
                    "remedy": "use a lighter optimizer",
                }
            },
            "variants": {
                "fp16": {
                    "status": "passed",
                    "peak_allocated_mib": 8100.0,
                    "vs_bf16_allocated": 0.976,
                    "vs_bf16_reserved": 0.98,
                }
            },
            "overhead": {
                "sampler": {
                    "achieved_hz": 19.9,
                    "nominal_hz": 20.0,
                    "cpu_share_of_one_core": 0.012,
                    "cpu_ms_per_sample": 0.6,
                },
                "gpt2_width": {"ratio": 1.004},
            },
            "estimate": {
                "phases": [{}],
                "predicted_peak_allocated_mib": 8251.2,
                "predicted_peak_phase": "worst_case",
                "vs_pilot_peak": 0.994,
            },
            "tui": {"skipped": "out of time (budget 480 s)"},
        },
    }
    text = "\n".join(summarise(res))
    assert text.startswith("gpu check on NVIDIA H200")
    assert "8,300" in text and "4,500" in text  # thousands separated (forward: peak allocated 1.5 x 3,000)
    assert "worst_case 1.0," in text and "forward gate (with its checks) 0.44" in text
    assert "oom first_step  ok: oom in update_first" in text and "[injected]" not in text
    assert "0.976x bf16's" in text and "metered / bare 1.004" in text
    assert "tui         skipped: out of time" in text
    assert "gpt2_pilot FAIL worst_case: next losses equal the uninterrupted run: differ: 1/2" in text
