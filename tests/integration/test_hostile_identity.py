"""Issue 14, item 1: Cockpit signals only the processes it started, and refuses run ids that are not its own.

A planted ``process.json`` names an unrelated process (a ``sleep`` started here):
with a null start time, with its true start time and its own command line, with
a command line that claims to be a Cockpit run of the folder, with another
folder's command line. ``launch.stop``, ``cockpit stop`` and a series' stop must
leave it running every time; the run never shows as running because of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cockpit import events as ev
from cockpit import launch, runs
from cockpit import notebook as nbm
from cockpit import series as sr
from cockpit.cli import main as cli
from tests.fake_runs import make_campaign


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process, in a session of its own (as a run's would be): it must survive every test."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _plant(rdir: Path, info: dict[str, object]) -> None:
    (rdir / runs.PROCESS_FILE).write_text(json.dumps(info), "utf-8")


def _variants(pid: int, rdir: Path) -> list[tuple[str, dict[str, object]]]:
    ct = psutil.Process(pid).create_time()
    own = psutil.Process(pid).cmdline()
    ours = [sys.executable, "-m", "cockpit.pilot", str(rdir.resolve())]
    other = [sys.executable, "-m", "cockpit.pilot", str(rdir.resolve().parent / "r9999")]
    return [
        ("null start time", {"pid": pid, "create_time": None, "cmdline": ours}),
        ("no start time", {"pid": pid, "cmdline": ours}),
        ("start time as text", {"pid": pid, "create_time": str(ct), "cmdline": ours}),
        ("its own command line", {"pid": pid, "create_time": ct, "cmdline": own}),
        ("a Cockpit command line it does not run", {"pid": pid, "create_time": ct, "cmdline": ours}),
        ("another folder's command line", {"pid": pid, "create_time": ct, "cmdline": other}),
        ("its command line plus the folder", {"pid": pid, "create_time": ct, "cmdline": [*own, str(rdir.resolve())]}),
        ("no command line", {"pid": pid, "create_time": ct}),
        ("a wrong start time", {"pid": pid, "create_time": ct - 5, "cmdline": own}),
        ("the pid as text", {"pid": str(pid), "create_time": ct, "cmdline": own}),
    ]


pytestmark = pytest.mark.slow  # starts a real (sleeping) process


def test_a_planted_process_json_never_makes_cockpit_signal_another_process(
    tmp_path: Path, stranger: subprocess.Popen[bytes]
) -> None:
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)
    trials = clean = 0
    for what, info in _variants(stranger.pid, rdir):
        for stop in ("launch.stop", "cockpit stop", "series stop"):
            _plant(rdir, info)
            assert not runs.is_alive(rdir), what  # never "running" because of a planted file
            assert runs.owned(rdir, wait_s=0.0) is None, what
            if stop == "launch.stop":
                said = launch.stop(rdir, grace_s=0.2)
                assert said.startswith("not"), (what, said)
            elif stop == "cockpit stop":
                assert cli(["stop", str(camp), rid, "--grace", "0.2"]) == 0
            else:
                item = sr.Item("lr1e-4", 0)
                s = sr.Series(camp, [], starter=lambda *a, **k: (rid, rdir))
                s.started.append(sr.Started(item, rid, rdir, ev.Tail(rdir / ev.EVENTS_FILE)))
                s.stop()
            time.sleep(0.05)
            trials += 1
            assert stranger.poll() is None, f"{what} / {stop}: the unrelated process was signalled"
            clean += 1
    assert (trials, clean) == (30, 30)
    # the row of a run whose "process" is someone else's settles as crashed, not running for ever
    assert runs.state(rdir).status == "crashed"


def test_the_process_group_of_a_non_leader_is_never_signalled(tmp_path: Path) -> None:
    """A Cockpit run leads its own session; a matching process that does not (here: a child of this test,
    in this test's group) is signalled alone, never with its group (which would include pytest)."""
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "-m", "cockpit.pilot", str(rdir.resolve())]
    child = subprocess.Popen(argv)  # same process group as pytest
    try:
        runs.write_process(rdir, child.pid, argv)
        assert runs.owned(rdir) is not None
        assert launch.stop(rdir, grace_s=5).startswith("stopped")
        assert child.wait(timeout=10) == -15
    finally:
        if child.poll() is None:
            child.kill()
    assert os.getpgid(0) == os.getpgid(os.getpid())  # and we are still here


@pytest.mark.parametrize(
    "argv",
    [
        ["stop", "{camp}", "../r0001"],
        ["stop", "{camp}", "r1"],
        ["stop", "{camp}", "/etc"],
        ["inspect", "{camp}", "../../x"],
        ["series", "{camp}", "--rerun", "../r0001", "--dry-run"],
        ["pilot", "{camp}", "--follows", "../r0001", "--detach"],
    ],
)
def test_run_ids_from_the_command_line_are_checked(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    camp = make_campaign(tmp_path)
    code = cli([a.format(camp=camp) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "not a run id" in err and "Traceback" not in err
    assert not (camp / "runs").exists() or not any((camp / "runs").iterdir())


def test_the_notebook_refuses_run_ids_that_could_name_a_path(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    text = (camp / "campaign.toml").read_text()
    for bad in ("../r0001", "r0001/../../x", "/tmp/x", "r1", "R0001", "r0001 "):
        (camp / "campaign.toml").write_text(text + f'\n[[runs]]\nid = "{bad}"\nvariant = "lr1e-4"\n')
        with pytest.raises(nbm.NotebookError, match=r"runs\[0\]\.id"):
            nbm.load(camp)
    (camp / "campaign.toml").write_text(
        text + '\n[[decisions]]\ndate = "2024-01-01"\ntext = "x"\nruns = ["../r0001"]\n'
    )
    with pytest.raises(nbm.NotebookError, match=r"decisions\[0\]\.runs"):
        nbm.load(camp)


def test_a_run_folder_that_is_a_link_is_not_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)
    elsewhere = tmp_path / "elsewhere"
    rdir.rename(elsewhere)
    rdir.symlink_to(elsewhere)
    assert cli(["stop", str(camp), rid]) == 2
    assert "symbolic link" in capsys.readouterr().err


def test_a_run_process_that_just_started_is_alive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Popen may return while the child is still inside its exec, when /proc shows an empty command line (one
    start in four in a tight loop on this machine, and a pilot's follower polls at once): that is not "another
    process", and the run is neither crashed nor unstoppable. The window is made certain here: the first reads
    of the command line come back empty, as they do inside an exec."""
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)
    argv = [sys.executable, "-c", "import time; time.sleep(30)", "-m", "cockpit.pilot", str(rdir.resolve())]
    real = psutil.Process.cmdline
    trials = clean = 0
    for empty_reads in (1, 2, 5):
        calls = {"n": 0}

        def cmdline(self: psutil.Process, calls: dict[str, int] = calls, empty: int = empty_reads) -> list[str]:
            calls["n"] += 1
            return [] if calls["n"] <= empty else real(self)

        proc = subprocess.Popen(argv, start_new_session=True)
        try:
            runs.write_process(rdir, proc.pid, argv)
            monkeypatch.setattr(psutil.Process, "cmdline", cmdline)
            trials += 1
            clean += runs.is_alive(rdir) and runs.state(rdir).status == "running"
            monkeypatch.setattr(psutil.Process, "cmdline", real)
        finally:
            proc.kill()
            proc.wait()
    assert (trials, clean) == (3, 3)


def test_a_live_run_stays_alive_when_the_wall_clock_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil's create_time is the wall clock's boot time plus the start ticks: when a VM's clock steps it moves for
    every process, and live pilots were read as crashed mid-resume. The start ticks since boot decide instead; a pid
    recycled by another process (other ticks) is still refused."""
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)
    argv = [sys.executable, "-c", "import time; time.sleep(30)", "-m", "cockpit.pilot", str(rdir.resolve())]
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).cmdline() != argv and time.monotonic() < deadline:
            time.sleep(0.01)
        runs.write_process(rdir, proc.pid, argv)
        info = json.loads((rdir / runs.PROCESS_FILE).read_text())
        assert isinstance(info["start_ticks"], int)
        real = psutil.Process.create_time
        monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) + 37.0)  # the clock stepped
        assert runs.is_alive(rdir)
        _plant(rdir, {**info, "start_ticks": info["start_ticks"] + 1})  # the same pid, another start
        assert not runs.is_alive(rdir)
    finally:
        proc.kill()
        proc.wait()
