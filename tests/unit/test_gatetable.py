"""A gate row is a record (gatetable.GateRow): a field Cockpit did not write, or wrote with the wrong type, is absent."""

from __future__ import annotations

import dataclasses

from cockpit.gatetable import GateRow, absent_words, busy_words, row


def test_a_gate_event_becomes_a_row_whose_unmeasured_counters_are_absent() -> None:
    r = row({"phase": "forward", "verdict": "pass", "mem": {"torch": None, "rss": 5 * 2**20}, "duration_s": 0.5})
    assert isinstance(r, GateRow)
    assert (r.phase, r.verdict, r.rss, r.duration_s) == ("forward", "pass", 5 * 2**20, 0.5)
    assert r.allocated is None and r.peak_reserved is None and r.nvml_used is None
    assert absent_words([{"phase": "forward", "mem": {}}]) == "GPU counters (torch, NVML) absent on this machine"


def test_fields_of_the_wrong_type_are_absent_not_an_error() -> None:
    r = row({"phase": 3, "mem": [1], "checks": "no", "inputs": 7, "duration_s": "slow", "machine": 1, "busy": True})
    assert (r.phase, r.checks, r.inputs, r.duration_s) == ("3", [], "", None)
    assert busy_words([{"phase": "data", "busy": "load 9", "machine": "not a dict"}]).startswith("* load 9 during")


def test_the_json_row_keeps_its_published_field_order() -> None:
    assert [f.name for f in dataclasses.fields(GateRow)] == [
        "phase", "rank", "inputs", "allocated", "reserved", "peak_allocated", "peak_reserved", "nvml_used",
        "rss", "rss_peak", "duration_s", "busy", "verdict", "remedy", "message", "checks",
    ]  # fmt: skip
