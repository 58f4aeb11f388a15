"""The shelf's table (``python -m tests.shelf.table``) reads each pilot's gates into one row per family: a
healthy case's failures and warnings by phase, each twin caught (or not) where the shelf expects it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cockpit.runs import RunState
from tests.shelf.table import render, row_of


def state(status: str, gates: list[dict[str, Any]]) -> RunState:
    return RunState("r0001", Path("/nowhere"), status, "export", "", None, None, None, "", gates)


def gate(phase: str, *checks: dict[str, Any]) -> dict[str, Any]:
    return {"phase": phase, "verdict": "pass", "checks": list(checks)}


def test_rows_name_failures_by_phase_and_tell_a_twin_caught_from_one_missed() -> None:
    healthy = row_of(
        "mixtral",
        state(
            "failed",
            [
                gate("data", {"name": "targets present", "ok": True, "detail": ""}),
                gate("accumulation", {"name": "accumulated == single batch", "ok": False, "detail": "differ by 3e-4"}),
            ],
        ),
    )
    assert [(f.phase, f.check, f.verdict) for f in healthy.findings] == [
        ("accumulation", "accumulated == single batch", "fail")
    ]
    caught = row_of(
        "mixtral_shifted_twice",
        state(
            "failed",
            [
                gate(
                    "data",
                    {
                        "name": "targets aligned as declared",
                        "ok": False,
                        "detail": "each output learns to predict two tokens ahead: the labels are shifted twice",
                    },
                )
            ],
        ),
    )
    assert caught.caught and caught.family == "mixtral"
    missed = row_of("lstm_forgot_shift", state("passed", [gate("data")]))
    assert not missed.caught and missed.family == "lstm"
    text = render({"mixtral": healthy, "mixtral_shifted_twice": caught, "lstm_forgot_shift": missed})
    assert "mixtral_shifted_twice" in text and "caught as expected" in text
    assert "NOT as expected: data / targets aligned as declared (fail)" in text
    assert "mixtral: fail at accumulation / accumulated == single batch: differ by 3e-4" in text
    assert "twins caught as expected 1/2" in text
