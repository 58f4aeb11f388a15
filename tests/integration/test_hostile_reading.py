"""Issue 14, item 3: bounded reading of run folders.

A FIFO planted in place of a run's files never blocks a reader; a line longer
than ``events.MAX_LINE`` is skipped without being held; the events summary
reads a file once (counting sample and step lines without decoding them), is
cached in ``summary.json`` by byte offset and continued when the file grows;
the fast path and the line-by-line path agree.
"""

from __future__ import annotations

import json
import os
import random
import threading
import tracemalloc
from pathlib import Path

import pytest

from cockpit import events as ev
from cockpit import runs
from cockpit.cli import main as cli
from cockpit.runs import brief
from tests.fake_runs import make_campaign, series_run, write_run

pytestmark = pytest.mark.slow  # fabricated files of hundreds of MiB and millions of lines: seconds each


def _call_with_timeout(fn, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it blocks."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the reader blocked"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


@pytest.mark.parametrize(
    "name", ["events.jsonl", "run.toml", "metrics.json", "inspect.json", "process.json", "curve.csv"]
)
def test_a_fifo_in_a_run_folder_never_blocks_runs_compare_or_report(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = make_campaign(tmp_path)
    _, rdir = series_run(camp, "lr1e-4", 0, 3.7)
    rid, open_dir = runs.create_run(camp)  # a row still "created": runs reads its folder
    for d in (rdir, open_dir):
        p = d / name
        if p.exists():
            p.unlink()
        os.mkfifo(p)
    for argv in (["runs", str(camp)], ["compare", str(camp)], ["report", str(camp)], ["inspect", str(camp), rid]):
        code = _call_with_timeout(lambda argv=argv: cli(argv))
        err = capsys.readouterr().err
        assert "Traceback" not in err, (argv, err)
        assert code in (0, 2), (argv, code, err)


def test_the_summary_refuses_a_fifo_and_a_device(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / ev.EVENTS_FILE)
    s = _call_with_timeout(lambda: runs.summary(tmp_path))
    assert s.refused and "FIFO" in s.refused
    tail = ev.Tail(tmp_path / ev.EVENTS_FILE)
    assert _call_with_timeout(tail.read_new) == [] and tail.refused


def _events(n_steps: int, world: int = 1, extra: bool = True) -> bytes:
    rnd = random.Random(7)
    lines = []
    t = 1000.0

    def emit(kind: str, rank: int | None = None, **p: object) -> None:
        nonlocal t
        t += 0.001
        e = {"v": 1, "t": t, "kind": kind, **p}
        if rank is not None:
            e["rank"] = rank
        lines.append(json.dumps(e, separators=(",", ":")))

    ranks = list(range(world)) if world > 1 else [None]
    for r in ranks:
        emit("run_start", rank=r, run_id="r0001", world=world, params={"kind": "step", "note": '"kind":"gate"'})
    for ph in ("stack", "data", "update_first", "update_second"):
        for r in ranks:
            emit("phase_start", rank=r, phase=ph, inputs={})
            emit("sample", rank=r, phase=ph, rss=1, nvml=None, torch=None)
            if ph.startswith("update"):
                emit("step", rank=r, step=1, loss=1.0, phase=ph, duration_s=0.1)
            emit("gate", rank=r, phase=ph, verdict="pass", checks=[], inputs={}, mem={"rss_peak": 7 << 20})
    for i in range(1, n_steps + 1):
        r = ranks[i % len(ranks)]
        emit("step", rank=r, step=i, loss=1.0, lr=0.1, grad_norm=1.0, examples=2, duration_s=0.01, phase="train")
        if extra and i % 5 == 0:
            emit("sample", rank=r, phase="train", rss=1, nvml=None, torch=None)
        if extra and i % 50 == 0:
            emit("eval", rank=r, step=i, loss=2.0, metrics={})
        if extra and i % 777 == 0:
            emit("log", rank=r, level="info", message='text with "kind":"step" in it')
        if extra and i == n_steps // 2:
            lines.append("not json {")
        if extra and rnd.random() < 0.0005:
            lines.append("")
    for r in ranks:
        emit("run_end", rank=r, status="completed", stop_reason="budget reached")
    return ("\n".join(lines) + "\n").encode()


def _strip(s: brief.Summary) -> dict[str, object]:
    d = s.to_json()
    d.pop("tails")
    return d


@pytest.mark.parametrize("world", [1, 2])
def test_the_fast_path_gives_the_same_summary_as_reading_every_line(tmp_path: Path, world: int) -> None:
    p = tmp_path / ev.EVENTS_FILE
    p.write_bytes(_events(20_000, world) + b'{"v":1,"t":1,"kind":"st')  # and a torn last line
    fast, _ = brief.scan(p)
    slow, _ = brief.scan(p, fast=False)
    assert _strip(fast) == _strip(slow)
    assert fast.counts["step"] == 20_000 + 2 * world and fast.bad_lines == 1
    assert fast.max_step == 20_000
    # the whole-file reader agrees on what matters
    evs = ev.read_events(p)
    assert ev.gates(evs) == ev.gates(fast.events)
    assert [e for e in evs if e["kind"] == "run_end"] == [e for e in fast.events if e["kind"] == "run_end"]
    assert fast.last_t == evs[-1]["t"]


def test_the_summary_continues_where_it_stopped_wherever_the_file_was_cut(tmp_path: Path) -> None:
    data = _events(3_000)
    p = tmp_path / ev.EVENTS_FILE
    whole = _strip(brief.scan(_write(p, data))[0])
    rnd = random.Random(1)
    for _ in range(25):
        cut = rnd.randrange(len(data))
        first, _ = brief.scan(_write(p, data[:cut]))
        with open(p, "ab") as fh:
            fh.write(data[cut:])
        again, parsed = brief.scan(p, base=first)
        assert parsed == len(data) - first.offset
        assert _strip(again) == whole


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def test_summary_json_is_written_after_a_large_parse_and_used_next_time(tmp_path: Path) -> None:
    data = _events(30_000)
    assert len(data) > brief.WRITE_BACK_BYTES
    (tmp_path / ev.EVENTS_FILE).write_bytes(data)
    brief._memo.clear()
    s = runs.summary(tmp_path)
    assert (tmp_path / brief.SUMMARY_FILE).is_file()
    brief._memo.clear()
    cached = brief.cached(tmp_path)
    assert cached is not None and cached.offset == s.offset
    again, parsed = brief.scan(tmp_path / ev.EVENTS_FILE, base=cached)
    assert parsed == 0 and _strip(again) == _strip(s)
    # a file replaced by another one (same size or not) is never continued from the stale summary
    (tmp_path / ev.EVENTS_FILE).write_bytes(
        _events(30_000).replace(b'"stop_reason":"budget reached"', b'"stop_reason":"BUDGET REACHED"')
    )
    brief._memo.clear()
    fresh = runs.summary(tmp_path)
    assert any(e.get("stop_reason") == "BUDGET REACHED" for e in fresh.events)


def test_a_huge_line_is_skipped_without_being_held(tmp_path: Path) -> None:
    p = tmp_path / ev.EVENTS_FILE
    with open(p, "wb") as fh:
        fh.write(b'{"v":1,"t":1,"kind":"run_start","world":1}\n')
        fh.write(b'{"v":1,"t":2,"kind":"log","message":"' + b"x" * (20 * ev.MAX_LINE) + b'"}\n')
        fh.write(b'{"v":1,"t":3,"kind":"run_end","status":"passed","stop_reason":"ok"}\n')
    tracemalloc.start()
    s, _ = brief.scan(p)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 * ev.MAX_LINE, peak
    assert s.bad_lines == 1 and [e["kind"] for e in s.events] == ["run_start", "run_end"]
    tail = ev.Tail(p)
    assert [e["kind"] for e in tail.read_new()] == ["run_start", "run_end"] and tail.bad_lines == 1


def test_a_torn_last_line_stays_pending_for_tail_and_summary(tmp_path: Path) -> None:
    p = tmp_path / ev.EVENTS_FILE
    p.write_bytes(b'{"v":1,"t":1,"kind":"run_start"}\n{"v":1,"t":2,"kind":"ga')
    tail = ev.Tail(p)
    assert [e["kind"] for e in tail.read_new()] == ["run_start"]
    s, _ = brief.scan(p)
    with open(p, "ab") as fh:
        fh.write(b'te","phase":"data"}\n')
    assert [e["kind"] for e in tail.read_new()] == ["gate"] and tail.bad_lines == 0
    s2, _ = brief.scan(p, base=s)
    assert [e["kind"] for e in s2.events] == ["run_start", "gate"] and s2.bad_lines == 0


@pytest.mark.slow  # writes and reads 200,000 events: 3.4 s
def test_reading_a_long_run_holds_little_memory(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    _, rdir = write_run(camp, status=None)  # crashed: its status needs its events
    with open(rdir / ev.EVENTS_FILE, "ab") as fh:
        fh.write(_events(200_000, extra=False))
    size = (rdir / ev.EVENTS_FILE).stat().st_size
    brief._memo.clear()
    tracemalloc.start()
    st = runs.state(rdir)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert st.status == "completed"
    assert peak < size / 4 and peak < 16 << 20, (peak, size)


def test_hostile_values_in_events_do_not_break_readers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    camp = make_campaign(tmp_path)
    _, rdir = write_run(camp, status=None)
    with open(rdir / ev.EVENTS_FILE, "a") as fh:
        for e in (
            {"v": 1, "t": "soon", "kind": "gate", "phase": 5, "mem": {"torch": {"peak_reserved": "lots"}}},
            {"v": 1, "t": 2, "kind": "gate", "phase": "[/bold]", "mem": [], "verdict": "[red]", "checks": "x"},
            {"v": 1, "t": 3, "kind": "run_end", "status": "[bold]x[/]", "stop_reason": "[/]", "rank": "zero"},
        ):
            fh.write(json.dumps(e) + "\n")
    brief._memo.clear()
    st = runs.state(rdir)
    assert st.stop_reason == "[/]"
    for argv in (["runs", str(camp)], ["compare", str(camp)], ["report", str(camp)], ["sheet", str(camp)]):
        cli(argv)
        err = capsys.readouterr().err
        assert "Traceback" not in err, (argv, err)


def test_a_long_curve_is_sampled_for_charts_and_agrees_with_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cockpit.runs import files

    path = tmp_path / runs.CURVE_FILE
    with open(path, "w") as fh:
        fh.write("step,loss,lr,grad_norm,examples_seen,elapsed_s\n")
        fh.writelines(f"{s},{4.0 / (1 + s * 1e-4):.6f},0.0001,1.0,{s * 16},{s * 0.01:.2f}\n" for s in range(1, 60_001))
    monkeypatch.setattr(files, "FULL_READ_BYTES", 1 << 20)  # as if it were a run of millions of updates
    assert path.stat().st_size > files.FULL_READ_BYTES
    tracemalloc.start()
    sampled = runs.read_series(path, "loss")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    monkeypatch.setattr(files, "FULL_READ_BYTES", 1 << 40)
    whole = runs.read_series(path, "loss")
    assert len(sampled) <= files.MAX_POINTS and len(whole) <= files.MAX_POINTS
    assert peak < 4 << 20, peak
    by_step = dict(whole)
    close = [abs(v - by_step[s]) / by_step[s] < 0.02 for s, v in sampled if s in by_step]
    assert len(close) > len(sampled) * 0.9 and all(close)


@pytest.mark.parametrize(
    "planted",
    [
        "not json",
        '{"format": 1, "offset": "x"}',
        '{"format": 1, "offset": 10, "kept": [[1, 2]]}',
        '{"format": 1, "offset": 10, "steps": {"a": [1, 2]}}',
        '{"format": 1, "offset": 10, "counts": {"step": "many"}}',
        '{"format": 2}',
        "[]",
    ],
)
def test_a_planted_or_corrupt_summary_json_is_ignored(tmp_path: Path, planted: str) -> None:
    (tmp_path / ev.EVENTS_FILE).write_bytes(_events(100))
    (tmp_path / brief.SUMMARY_FILE).write_text(planted)
    brief._memo.clear()
    assert brief.cached(tmp_path) is None
    s = runs.summary(tmp_path)
    assert s.counts["step"] == 102 and s.offset == (tmp_path / ev.EVENTS_FILE).stat().st_size
