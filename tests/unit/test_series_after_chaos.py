"""What bench/chaos_series.py found (issue 37), each defect held by its own test.

A series whose sequencer was killed leaves its runs going on detached; starting what is left again
(``cockpit series --skip-done``) must not start a second run of a variant x seed that still trains.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit import runs
from cockpit import series as sr
from tests.fake_runs import make_campaign


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    return make_campaign(tmp_path)


@pytest.fixture
def live_run(campaign: Path) -> Iterator[tuple[str, Path]]:
    """A training run whose process lives: a stand-in that sleeps under the run's own command line."""
    rid, rdir = runs.create_run(campaign, "lr5e-5", 1, kind="train")
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "-m", "cockpit.pilot", str(rdir.resolve())]
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        runs.write_process(rdir, proc.pid, argv)
        assert runs.is_alive(rdir)
        yield rid, rdir
    finally:
        proc.kill()
        proc.wait()


def test_skip_done_leaves_out_a_variant_and_seed_whose_run_still_trains(
    campaign: Path, live_run: tuple[str, Path]
) -> None:
    """Defect: `cockpit series --skip-done` after the series' process was killed started a second run of every
    item whose run was still going on detached (the chaos bench ended with two completed runs of one item)."""
    rid, _ = live_run
    items, notes = sr.plan(nbm.load(campaign), ["lr5e-5"], [0, 1], skip_done=True)
    assert [(i.variant, i.seed) for i in items] == [("lr5e-5", 0)]
    assert any(rid in n and "still running" in n for n in notes), notes


def test_a_run_across_a_backward_clock_step_settles_without_a_negative_duration(campaign: Path) -> None:
    """Defect: the wall clock stepped back during a run (a VM's clock resynchronised) gave its row a negative
    duration, which the notebook's checks refuse: the run's own row, the series' settle and every writing command
    after it failed with "the campaign notebook has N problems", and the run stayed `running` in the notebook."""
    from cockpit import events as ev

    rid, rdir = runs.create_run(campaign, "lr5e-5", 0, kind="train")
    with ev.EventWriter(rdir / ev.EVENTS_FILE) as w:
        w.emit(ev.RUN_START, t=2_000_000_000.0, run_id=rid, variant="lr5e-5", seed=0, run_kind="train", world=1)
        w.emit(ev.RUN_END, t=2_000_000_000.0 - 600, status="completed", stop_reason="budget reached", exit_code=0)
    runs.settle_run(campaign, rdir)  # raised NotebookError before the fix
    row = nbm.load(campaign).run(rid)
    assert row.status == "completed"
    assert row.duration_s is None  # unknown across the step, never a negative figure
    assert runs.state(rdir).duration_s is None


def test_a_run_killed_under_a_live_series_leaves_no_temporary(campaign: Path) -> None:
    """Defect: a run SIGKILLed while its series watched it kept its temporaries for ever (the 256 KiB disk reserve,
    a half-written checkpoint): the series wrote its row as crashed without sweeping its folder, and a settled row
    is never looked at again."""
    import os
    import signal
    import time

    started: list[subprocess.Popen[bytes]] = []

    def starter(rdir: Path, nproc: int = 1, env: dict[str, str] | None = None) -> None:
        rdir = Path(rdir).resolve()
        code = "import pathlib, sys, time; pathlib.Path(sys.argv[-1], '.disk-reserve-0.tmp').write_bytes(b'0'); time.sleep(60)"
        argv = [sys.executable, "-c", code, "-m", "cockpit.pilot", str(rdir)]
        proc = subprocess.Popen(argv, start_new_session=True)
        started.append(proc)
        runs.write_process(rdir, proc.pid, argv)

    def fake_start(campaign: Path, variant: str, seed: int, **kw: object) -> tuple[str, Path]:
        from cockpit import launch

        return launch.new_run(campaign, variant, seed, kind="train", starter=starter)

    series = sr.Series(campaign, [sr.Item("lr5e-5", 0)], starter=fake_start)
    try:
        series.poll()
        (s,) = series.started
        deadline = time.monotonic() + 30
        while not (s.dir / ".disk-reserve-0.tmp").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.killpg(started[0].pid, signal.SIGKILL)
        started[0].wait()
        while not series.done:
            assert time.monotonic() < deadline
            series.poll()
            time.sleep(0.05)
    finally:
        for p in started:
            p.kill()
            p.wait()
    assert nbm.load(campaign).run(s.run_id).status == "crashed"
    assert sorted(p.name for p in s.dir.iterdir() if p.name.endswith(".tmp")) == []


def test_resume_leaves_out_a_crashed_run_that_a_newer_run_follows(campaign: Path) -> None:
    """Defect: a crashed run with a checkpoint that `--skip-done` had already started again as a new run (which
    follows it) was resumed too by `cockpit series --resume`: the variant and seed then completed twice."""
    import json

    old, odir = runs.create_run(campaign, "lr5e-5", 1, kind="train")
    (odir / runs.CHECKPOINTS_DIR).mkdir()
    (odir / runs.CHECKPOINTS_DIR / "update-00010.pt").write_bytes(b"0")
    (odir / runs.PROCESS_FILE).write_text(json.dumps({"pid": 2**22 + 12345, "create_time": 1.0}))
    runs.settle(campaign)
    assert [i.resume for i in sr.resumable(nbm.load(campaign))] == [old]
    new, _ = runs.create_run(campaign, "lr5e-5", 1, kind="train", follows=old)
    assert sr.resumable(nbm.load(campaign)) == []
    with pytest.raises(Exception, match=f"{new}"):
        sr.resumable(nbm.load(campaign), [old])


def test_the_chaos_bench_takes_a_run_that_ended_before_its_signal_for_gone_not_a_stranger() -> None:
    """The Ray chaos series failed with 'refused to signal pid N (run r0004): not started by this bench': the run
    ended between the look that chose it and the signal, and its zombie's environment reads empty."""
    spec = importlib.util.spec_from_file_location(
        "chaos_series", Path(__file__).resolve().parents[2] / "bench" / "chaos_series.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("chaos_series", bench)
    spec.loader.exec_module(bench)
    token = "t-123"
    env = {**os.environ, bench.TOKEN_ENV: token}
    proc = subprocess.Popen([sys.executable, "-c", "pass"], env=env)
    try:
        for _ in range(200):  # exited, not reaped: a zombie
            with open(f"/proc/{proc.pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                    break
            time.sleep(0.05)
        assert bench.ours(proc.pid, token) is None
    finally:
        proc.wait()
    assert bench.ours(proc.pid, token) is None  # reaped: gone
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(100):  # its environment is readable once exec has run
            if bench.ours(live.pid, token):
                break
            time.sleep(0.05)
        assert bench.ours(live.pid, token) is True
        assert bench.ours(stranger.pid, token) is False
    finally:
        for p in (live, stranger):
            p.kill()
            p.wait()
