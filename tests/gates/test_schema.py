"""The event schema carries every field a writer writes, and every reader finds a line's kind the same way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cockpit import events as ev
from cockpit.pilot.context import Context
from cockpit.pilot.phases import PHASES
from cockpit.pilot.pilot import run_phase
from tests.gates.test_phases import PARAMS, classifier

ENVELOPE = {"v", "t", "kind", "rank", "device"}
GATE_FIELDS = set(ev.GateFields.__annotations__)
WRITE = re.compile(r"""\bextra\[["'](\w+)["']\]\s*=[^=]""")


def test_every_gate_figure_written_in_the_code_is_declared() -> None:
    root = Path(__file__).resolve().parents[2] / "cockpit"
    written = {m.group(1) for f in root.rglob("*.py") for m in WRITE.finditer(f.read_text())}
    assert len(written) > 20  # the pattern still finds the writers
    assert written <= ev.GATE_EXTRAS, sorted(written - ev.GATE_EXTRAS)


def test_every_field_of_a_recorded_gate_is_in_the_schema(tmp_path: Path) -> None:
    sink: list[dict[str, Any]] = []
    ctx = Context.in_memory(classifier(), PARAMS, rdir=tmp_path, events=sink)
    for phase in PHASES:
        g, ended = run_phase(ctx, phase)
        assert ended is None, (phase.name, g.checks)
    gates = [e for e in sink if e["kind"] == ev.GATE]
    assert len(gates) == len(PHASES)
    for e in gates:
        assert set(e) >= GATE_FIELDS, e["phase"]
        assert set(e) <= GATE_FIELDS | ev.GATE_EXTRAS | ENVELOPE, (e["phase"], sorted(set(e) - GATE_FIELDS - ENVELOPE))
    assert {"initial_loss", "step_time", "predictions", "machine"} <= {k for e in gates for k in e}
    for e in sink:  # every kind the pilot writes, not only gates
        assert set(e) <= ev.EVENT_FIELDS, (e["kind"], sorted(set(e) - ev.EVENT_FIELDS))
    assert {ev.PHASE_START, ev.GATE, ev.STEP, ev.LOG} <= {e["kind"] for e in sink}


def test_a_lines_kind_is_read_from_its_head() -> None:
    assert ev.kind_of_line(b'{"v":1,"t":1733000000.123456,"kind":"sample","rss":1}') == ev.SAMPLE
    assert ev.kind_of_line(b'{"v": 1, "t": 1.5, "kind": "gate", "phase": "save"}') == ev.GATE
    # a log quoting a sample is a log: the ingest's old test found the tag anywhere in the line
    quoted = b'{"v":1,"t":1.0,"kind":"log","message":"saw {\\"kind\\":\\"sample\\"}"}'
    assert ev.kind_of_line(quoted) == ev.LOG
    assert ev.kind_of_line(b'{"v":1,"t":1.0,"kind":"other"}') is None
    assert ev.kind_of_line(b"not json") is None
    assert ev.kind_of_line(b'{"v":1,"t":1.0,"message":"' + b"x" * 80 + b'","kind":"log"}') is None
    for kind in ev.KINDS:  # what the writer writes, each kind
        line = __import__("json").dumps(ev.make(kind, phase="x"), separators=(",", ":")).encode()
        assert ev.kind_of_line(line) == kind
