"""Issue 14, item 5: faults named as what they are: the tests that start processes or load models (the rest:
tests/unit/test_hostile_faults.py)."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cockpit import events as ev
from cockpit import fsutil, launch, runs
from cockpit import notebook as nbm
from cockpit.cli import main as cli
from tests.fake_runs import make_campaign
from tests.unit.test_hostile_faults import SIGTERM_INSIDE_NUMPY, TERM_IN_SAVE


def _full_notebook_write(monkeypatch: pytest.MonkeyPatch) -> None:
    store = sys.modules["cockpit.notebook.store"]

    def full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(store, "_write_atomic", full)


def _full_run_toml(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:  # the first fsync of create_run is run.toml's
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.slow  # runs `cockpit pilot` as far as a full disk lets it: 4-6 s each
@pytest.mark.parametrize("fill", [_full_notebook_write, _full_run_toml], ids=["notebook", "run.toml"])
def test_creating_a_run_on_a_full_disk_leaves_no_folder_no_row_and_no_used_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fill
) -> None:
    camp = make_campaign(tmp_path)
    fill(monkeypatch)
    assert cli(["pilot", str(camp), "--detach"]) == 2
    err = capsys.readouterr().err
    assert "disk full" in err and "Traceback" not in err, err
    monkeypatch.undo()
    assert runs.run_dirs(camp) == [] and not list((camp / "runs").iterdir())
    assert nbm.load(camp).runs == []
    rid, _ = runs.create_run(camp)
    assert rid == "r0001"  # no id was used up


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]).returncode == 0


@pytest.mark.slow  # runs `cockpit pilot` as far as a full disk lets it: 4-6 s each
def test_a_really_full_disk_when_creating_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a real filesystem that is full (a small tmpfs, when this test may mount one)."""
    disk = tmp_path / "disk"
    if not _tmpfs(disk, "256k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        camp = make_campaign(disk)
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the disk, then free less than a run.toml needs
        with pytest.raises(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
        os.close(fd)
        os.truncate(filler, filler.stat().st_size - 1024)
        code = cli(["pilot", str(camp), "--detach"])
        err = capsys.readouterr().err
        assert code == 2 and "disk full" in err and "Traceback" not in err, err
        assert runs.run_dirs(camp) == [] and nbm.load(camp).runs == []
        filler.unlink()
        rid, _ = runs.create_run(camp)
        assert rid == "r0001"
    finally:
        subprocess.run(["umount", str(disk)])


def _fill(disk: Path, leave: int = 0) -> Path:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError):
        while True:
            os.write(fd, b"\0" * 4096)
    os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


@pytest.mark.slow
def test_a_run_whose_disk_fills_up_ends_as_disk_full_with_its_row(tmp_path: Path) -> None:
    """A real training run on a small tmpfs that fills up while it trains: it ends with status error, reason
    "disk full", exit 10, and its notebook row says so (the room it set aside at its start is given back)."""
    from tests.integration.test_series import tiny_campaign

    disk = tmp_path / "disk"
    if not _tmpfs(disk, "64m"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        camp = tiny_campaign(disk, "full")
        nbm.mutate(camp, lambda nb: setattr(nb.batch, "updates", 100_000))
        rid, rdir = launch.new_run(camp, None, 0, kind="train", env={"OMP_NUM_THREADS": "1"})
        tail = ev.Tail(rdir / ev.EVENTS_FILE)
        deadline = time.monotonic() + 300
        while not any(e.get("kind") == ev.STEP for e in tail.read_new()):
            assert time.monotonic() < deadline and runs.is_alive(rdir), (rdir / "output.log").read_text()[-2000:]
            time.sleep(0.1)
        filler = _fill(disk)
        assert launch.wait(rdir, timeout=300)
        st = runs.state(rdir)
        assert (st.status, (st.run_end or {}).get("exit_code")) == ("error", 10), st.stop_reason
        assert st.stop_reason.startswith("disk full")
        assert nbm.load(camp).run(rid).stop_reason.startswith("disk full")
        assert not fsutil.temporaries(rdir)  # the reserve and any half-written file are gone
        filler.unlink()
    finally:
        subprocess.run(["umount", "-l", str(disk)])


@pytest.mark.slow
def test_sigterm_at_random_moments_inside_checkpoint_and_export_writes_is_a_stop(tmp_path: Path) -> None:
    rnd = random.Random(14)
    trials = clean = 0
    for i in range(8):
        out = tmp_path / f"t{i}"
        out.mkdir()
        proc = subprocess.Popen(
            [sys.executable, "-c", TERM_IN_SAVE, str(out)], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rnd.uniform(0.05, 1.5))  # somewhere inside a torch.save or the file's replace
        os.kill(proc.pid, signal.SIGTERM)
        last = proc.stdout.read().strip().splitlines()
        code = proc.wait(timeout=120)
        trials += 1
        outcome = json.loads(last[-1]) if last else {}
        left = fsutil.temporaries(out) + fsutil.temporaries(out / "artifact")
        if code == 7 and outcome.get("status") == "stopped" and not left:
            clean += 1
        else:
            pytest.fail(f"trial {i}: exit {code}, {outcome}, temporaries left: {left}")
    assert (trials, clean) == (8, 8)


@pytest.mark.slow
def test_sigterm_right_after_the_run_process_starts_is_a_stop(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    rnd = random.Random(5)
    trials = clean = 0
    for delay in [0.0, 0.0, 0.001, *[rnd.uniform(0.0, 0.4) for _ in range(3)]]:
        rid, rdir = runs.create_run(camp)
        pid = launch.start(rdir, env={"OMP_NUM_THREADS": "1"})
        if delay:
            time.sleep(delay)
        os.kill(pid, signal.SIGTERM)
        code = launch._children[pid].wait(timeout=120)
        st = runs.state(rdir)
        trials += 1
        assert (code, st.status) == (7, "stopped"), (delay, code, st.status, (rdir / "output.log").read_text()[-2000:])
        assert st.run_end is not None and st.run_end["exit_code"] == 7
        assert nbm.load(camp).run(rid).status == "stopped"
        clean += 1
    assert (trials, clean) == (6, 6)


@pytest.mark.slow
def test_sigterm_while_torch_loads_its_c_extensions_is_a_stop(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SIGTERM_INSIDE_NUMPY)
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)
    root = Path(__file__).resolve().parents[2]
    pid = launch.start(rdir, env={"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(hook), str(root)])})
    code = launch._children[pid].wait(timeout=120)
    st = runs.state(rdir)
    log = (rdir / "output.log").read_text()[-2000:]
    assert (code, st.status) == (7, "stopped"), (code, st.status, log)
    assert st.run_end is not None and "before the run started" in st.run_end["stop_reason"], st.run_end
    assert nbm.load(camp).run(rid).status == "stopped"


@pytest.mark.slow
def test_a_series_sequencer_stopped_by_sigterm_lists_the_runs_it_did_not_start(tmp_path: Path) -> None:
    from tests.integration.test_series import tiny_campaign

    camp = tiny_campaign(tmp_path, "seq")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cockpit",
            "series",
            str(camp),
            "--seeds",
            "0,1,2",
            "--updates",
            "200",
            "--without-pilot",
            "the test stops the series, not the runs' training",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 120
    while not (camp / "runs" / "r0001" / runs.PROCESS_FILE).exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    try:
        assert proc.returncode == 143, err
        assert "stopped by SIGTERM" in err and "not started (" in err, err
        assert "lr1e-4 seed 2" in err and "r0001" in err and "still running" in err, err
    finally:
        launch.stop(camp / "runs" / "r0001", grace_s=5)


@pytest.mark.slow
def test_the_tui_exits_non_zero_after_an_unhandled_exception(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import argparse

    from textual.app import App

    import cockpit.tui.app as tui_app
    from cockpit.commands import tui as tui_cmd

    class Boom(App[None]):
        def __init__(self, campaign: object) -> None:
            super().__init__()

        def on_mount(self) -> None:
            raise RuntimeError("boom")

        def run(self, **kw: object) -> None:  # type: ignore[override]
            super().run(headless=True)

    monkeypatch.setattr(tui_app, "CockpitApp", Boom)
    assert tui_cmd.run(argparse.Namespace(campaign=str(make_campaign(tmp_path)))) == 1
