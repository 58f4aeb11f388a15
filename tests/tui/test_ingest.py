"""The event feed without the UI: bounded batches, torn lines, peaks kept when downsampling."""

from __future__ import annotations

import json
from pathlib import Path

from cockpit import events as ev
from cockpit.tui.ingest import RunFeed, TimedValues, gate_peak
from tests.tui.support import FIXTURE


def test_recorded_pilot_folds_into_gates_series_and_log():
    feed = RunFeed(FIXTURE / "runs" / "r0001" / ev.EVENTS_FILE)
    feed.drain()
    assert list(feed.gates) == list(ev.PHASES)
    assert feed.end is not None and feed.end["status"] == "passed"
    assert [m.phase for m in feed.marks] == list(ev.PHASES)
    assert set(feed.mem) == {"gpu0", "alloc", "reserved", "rss"}
    assert feed.capacity["gpu0"] == 23034 * 2**20
    assert len(feed.loss.y) == 64
    peaks = {p: feed.phase_peak(p)[0] for p in ev.PHASES}
    assert max(peaks, key=lambda p: peaks[p] or 0) == "worst_case"
    assert feed.phase_peak("worst_case")[1] == "torch peak reserved"


def test_cpu_run_uses_rss_and_skips_the_torn_line():
    feed = RunFeed(FIXTURE / "runs" / "r0002" / ev.EVENTS_FILE)
    feed.drain()
    assert feed.end is None and feed.phase == "backward"
    assert not feed.has_gpu
    assert feed.phase_peak("stack") == (1100 * 2**20, "process peak RSS")
    assert feed.bad_lines == 0  # the torn last line is pending, not bad


def test_poll_is_bounded_and_decimates_samples_when_behind(tmp_path: Path):
    path = tmp_path / ev.EVENTS_FILE
    sample = json.dumps(ev.make(ev.SAMPLE, phase="x", rss=1, nvml=None, torch=None)) + "\n"
    gate = json.dumps(ev.make(ev.GATE, phase="data", verdict="pass", checks=[])) + "\n"
    path.write_text((sample * 5_000 + gate) * 4)
    feed = RunFeed(path, chunk_bytes=16 * 1024, budget_s=0.0)  # one chunk per poll
    assert feed.poll() == {"mem"}
    assert feed.lines_read <= 16 * 1024 // len(sample) + 1
    assert feed.samples_skipped > 0  # far behind: most samples are passed over undecoded
    while feed.behind_bytes:
        feed.poll()
    assert feed.lines_read == 20_004  # every line accounted for
    assert "data" in feed.gates  # gates are never skipped
    assert feed.events_read < 20_004


def test_torn_line_waits_for_its_newline(tmp_path: Path):
    path = tmp_path / ev.EVENTS_FILE
    line = json.dumps(ev.make(ev.LOG, level="info", message="hello"))
    path.write_text(line[:20])
    feed = RunFeed(path)
    assert feed.poll() == set()
    with open(path, "a") as fh:
        fh.write(line[20:] + "\n{not json}\n")
    assert feed.poll() == {"log"}
    assert feed.bad_lines == 1 and list(feed.log) == ["info    hello"]


def test_downsampling_keeps_the_peak():
    s = TimedValues(limit=100)
    for i in range(10_000):
        s.add(float(i), 5.0 if i == 6_789 else 1.0)
    assert len(s.y) <= 100
    assert s.peak == 5.0
    assert s.t[0] == 0.0 and s.t == sorted(s.t)


def test_gate_peak_in_a_gpu_run_ignores_rss():
    gate = {"mem": {"torch": None, "nvml": None, "rss": 10}}
    assert gate_peak(gate, gpu=True) == (None, "")
    assert gate_peak(gate) == (10.0, "process peak RSS")
