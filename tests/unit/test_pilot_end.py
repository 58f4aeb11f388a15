"""The CLI pilot's end at 80x24: the table, one line per finding, what was not measured and the busy machine
said once, the outcome, and what to run next (issue 24, item 8)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cockpit import events as ev
from cockpit import runs
from cockpit.commands import pilot as cmd
from cockpit.gatetable import findings
from tests.fake_runs import cpu_stack, gate, make_campaign, mem, write_run

# As the demo pilot recorded them on a CPU box at a 1-minute load of 5-9: every phase busy, no GPU counter.
LOADS = [5.0, 8.7, 6.1, 5.2, 7.0, 8.0, 5.5, 6.6, 7.7, 5.9, 6.3, 8.2, 5.1, 6.0]


def demo_gates(**by_phase: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for phase, load in zip(ev.PHASES, LOADS, strict=False):
        machine = {"cpus": 2.0, "others_cpus": round(load - 1, 2), "own_cpus": 1.0, "load1": load, "busy": True}
        inputs = {"microbatch": 2, "accumulation": 8, "precision": "fp32", "lengths": [18, 28], "cropped_to": 48}
        g = gate(phase, mem(rss_mib=320), inputs, duration_s=0.5, machine=machine, busy=f"load {load} on 2 CPUs")
        g.update(by_phase.get(phase, {}))
        out.append(g)
    return out


def end(rdir: Path, width: int = 80) -> list[str]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, height=24, color_system=None, legacy_windows=False)
    cmd.print_result(runs.state(rdir), console=console)
    return buf.getvalue().rstrip("\n").split("\n")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_passed_demo_pilot_ends_in_24_lines_of_80_columns(here: Path) -> None:
    camp = make_campaign(here)
    assert len(ev.PHASES) == 14
    rid, rdir = write_run(camp, stack=cpu_stack(), gates=demo_gates())
    lines = end(rdir)
    text = "\n".join(lines)
    assert len(lines) <= 24, text
    assert max(len(x) for x in lines) <= 80, text
    assert sum(x.split()[0] in ev.PHASES for x in lines if x.split()) == 14, text  # every gate has its row
    assert "absent" in text and text.count("absent") == 1, text  # said once, not a column of them
    assert "alloc" not in text and "NVML MiB" not in text and "microbatch" not in text, text
    busy = [x for x in lines if "busy" in x]
    assert len(busy) == 1 and "load up to 8.7 on 2 CPUs" in busy[0] and "all 14 phases" in busy[0], text
    assert "of 2 CPUs busy" not in text
    assert lines[-1] == "next: cockpit series demo, then cockpit sheet demo", text


def test_findings_are_one_line_each_and_the_next_step_names_the_remedy(here: Path) -> None:
    camp = make_campaign(here)
    bad = {
        "verdict": "fail",
        "checks": [
            {"name": "targets present", "ok": False, "detail": "no labels in the batch"},
            {"name": "masks", "ok": False, "detail": "mask of another shape", "warn": True},
        ],
        "remedy": "return labels from collate",
    }
    na = {"verdict": "n/a", "checks": [{"name": "grad", "ok": True, "na": True, "detail": "not applicable: frozen"}]}
    gates = demo_gates(data=bad, leakage=na)[:3]
    rid, rdir = write_run(camp, stack=cpu_stack(), gates=gates, status="failed", reason="gate data failed")
    (rdir / "inspect.json").write_text(json.dumps({"examples": []}))
    said = [t.plain for t in findings(runs.state(rdir).gates)]
    assert said == [
        "fail data: targets present: no labels in the batch",
        "warn data: masks: mask of another shape -> return labels from collate",
        "n/a  leakage: not applicable: frozen",
    ]
    lines = end(rdir)
    assert "n/a" in "\n".join(lines)  # the table shows the verdict too
    nxt = (
        f"return labels from collate; cockpit inspect demo {rid} (the examples it used); then cockpit pilot demo again"
    )
    assert cmd.next_step(runs.state(rdir)) == nxt
    assert " ".join(" ".join(lines).split()).endswith(f"next: {nxt}")


def test_a_wide_terminal_keeps_the_inputs_and_json_keeps_every_field(here: Path) -> None:
    camp = make_campaign(here)
    rid, rdir = write_run(camp, stack=cpu_stack(), gates=demo_gates())
    assert "microbatch=2" in "\n".join(end(rdir, width=160))
    doc = cmd.summary(runs.state(rdir))
    g = doc["gates"][0]
    for key in ("inputs", "allocated", "reserved", "peak_reserved", "nvml_used", "rss", "busy", "checks"):
        assert key in g
    assert g["inputs_full"]["lengths"] == [18, 28] and g["machine"]["load1"] == 5.0
    assert doc["next"].startswith("cockpit series") and "absent" in doc["absent"] and "8.7" in doc["busy"]
