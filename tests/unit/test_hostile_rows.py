"""Issue 14, items 6 to 8: rows settle, writers never share a temporary, the notebook at scale.

6. A ``running`` row whose folder is gone and a ``created`` row whose launcher died before starting its
   process show a final status to readers (which never write) and are recorded by the next writing
   command; the temporaries of killed checkpoint and export writes are swept then.
7. Concurrent writers of one file (two ranks writing ``inspect.json``) each use a temporary of their own.
8. A pilot reads and writes the notebook a bounded number of times, whatever its size.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from cockpit import fsutil, runs
from cockpit import notebook as nbm
from cockpit.cli import main as cli
from tests.fake_runs import make_campaign, write_run

# --------------------------------------------------------------------------- 6. rows settle


def test_a_running_row_whose_folder_is_gone_settles_as_crashed(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)
    nbm.mutate(camp, lambda nb: setattr(nb.run(rid), "status", "running"))
    shutil.rmtree(rdir)
    before = (camp / "campaign.toml").read_bytes()
    (row,) = runs.view(nbm.load(camp))
    assert row.status == "crashed" and "run folder missing" in row.stop_reason
    assert (camp / "campaign.toml").read_bytes() == before  # a read never writes
    nb = runs.settle(camp)
    assert nb.run(rid).status == "crashed"
    assert nbm.load(camp).run(rid).status == "crashed"


def test_a_created_row_whose_launcher_died_settles_after_the_grace_period(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)  # no process was ever started: no process.json, no events
    (row,) = runs.view(nbm.load(camp))
    assert row.status == "created"  # a launcher may be about to start it
    old = time.time() - runs.state.__globals__["CREATED_GRACE_S"] - 5
    os.utime(rdir / runs.RUN_FILE, (old, old))
    (row,) = runs.view(nbm.load(camp))
    assert row.status == "crashed" and "never started" in row.stop_reason
    assert cli(["runs", str(camp)]) == 0
    assert nbm.load(camp).run(rid).status == "created"  # `runs` only read
    runs.settle(camp)
    assert nbm.load(camp).run(rid).status == "crashed"


def test_killed_writers_temporaries_are_swept_when_the_run_is_settled(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    _, rdir = write_run(camp, status=None)  # killed: no run_end, its process gone
    nbm.mutate(camp, lambda nb: setattr(nb.runs[-1], "status", "running"))
    (rdir / "artifact").mkdir()
    leftovers = [rdir / ".checkpoint.pt.x1y2z3.tmp", rdir / "artifact" / ".model.pt.abc.tmp"]
    for p in leftovers:
        p.write_bytes(b"\0" * (1 << 20))
    keep = [rdir / "checkpoint.pt", rdir / ".hidden-not-a-temporary"]
    for p in keep:
        p.write_bytes(b"x")
    runs.view(nbm.load(camp))
    assert all(p.exists() for p in leftovers)  # a read never removes anything
    runs.settle(camp)
    assert not any(p.exists() for p in leftovers)
    assert all(p.exists() for p in keep)


def test_a_live_runs_temporaries_are_never_swept(tmp_path: Path) -> None:
    import subprocess

    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp)
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "-m", "cockpit.pilot", str(rdir.resolve())]
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        runs.write_process(rdir, proc.pid, argv)
        tmp = rdir / ".checkpoint.pt.live.tmp"
        tmp.write_bytes(b"being written")
        runs.settle(camp)
        assert tmp.exists() and nbm.load(camp).run(rid).status == "created"
    finally:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- 7. distinct temporaries


def test_concurrent_writers_of_one_file_never_share_a_temporary(tmp_path: Path) -> None:
    target = tmp_path / "inspect.json"
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer(k: int) -> None:
        barrier.wait()
        for i in range(200):
            try:
                fsutil.write_text(target, f'{{"writer": {k}, "i": {i}}}' + " " * 1000)
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_text().startswith('{"writer": ')
    assert fsutil.temporaries(tmp_path) == []


def test_every_writer_in_cockpit_goes_through_the_atomic_helper() -> None:
    """No fixed temporary name (``NAME.tmp``) and no whole-file write outside fsutil, the notebook store and
    files written into a folder that is renamed into place at the end (archive, a new run folder)."""
    import re

    root = Path(__file__).resolve().parents[2] / "cockpit"
    allowed = {"fsutil.py", "archive/pack.py"}  # the archive writes into a folder renamed into place at the end
    offenders = []
    for path in root.rglob("*.py"):
        if "tui" in path.parts or str(path.relative_to(root)) in allowed:
            continue
        text = path.read_text()
        for pattern in (
            r"\+ \"\.tmp\"",
            r'[A-Za-z0-9_]\.tmp"',  # a fixed temporary name (globs of temporaries, with a *, are fine)
            r"(?<!fsutil)\.write_text\(",
            r"(?<!fsutil)\.write_bytes\(",
            r"os\.replace\(",
        ):
            for m in re.finditer(pattern, text):
                line = text[: m.start()].count("\n") + 1
                offenders.append(f"{path.relative_to(root)}:{line}: {pattern}")
    assert offenders == [], offenders


def test_two_reports_written_at_once_both_succeed(tmp_path: Path) -> None:
    from cockpit import report

    camp = make_campaign(tmp_path)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for _ in range(5):
                report.write(camp)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and (camp / "report" / "report.md").is_file()


# --------------------------------------------------------------------------- 8. the notebook at scale


def test_a_notebook_write_failing_for_lack_of_space_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    camp = make_campaign(tmp_path)
    before = (camp / "campaign.toml").read_bytes()
    real = fsutil.atomic_writer

    def full(path: Path, *a: object, **k: object):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(fsutil, "atomic_writer", full)
    with pytest.raises(nbm.NotebookError, match="disk full"):
        nbm.mutate(camp, lambda nb: setattr(nb.campaign, "question", "x"))
    monkeypatch.setattr(fsutil, "atomic_writer", real)
    assert (camp / "campaign.toml").read_bytes() == before
