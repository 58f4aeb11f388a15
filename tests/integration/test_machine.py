"""The machine as it is: a busy CPU marks the phases it timed, GPU memory held by other processes is named and: the
tests that start processes or load models (the rest: tests/unit/test_machine.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit import runs
from tests.fake_runs import make_campaign


@pytest.mark.slow  # starts a child process that computes
def test_a_child_of_the_run_computes_with_the_runs_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resume child started while the load differed used another thread count, and the demo's resume check
    failed on losses equal to six digits (4.475407/4.475407): the child now takes the run's count."""
    import subprocess
    import sys

    import torch

    from cockpit.pilot import threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        env = threads.child_env({"PATH": "/bin"})
        assert env[threads.PARENT_THREADS] == "1"
        code = "from cockpit.pilot.threads import follow_parent_threads as f; import torch; f(); print(torch.get_num_threads())"
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True)
        assert out.stdout.strip() == "1", out.stderr
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_a_series_run_stops_before_filling_the_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real training run whose disk is (faked) full stops as `stopped` with the reason, not a crash, and writes
    nothing more."""
    from cockpit import launch

    camp = make_campaign(tmp_path)
    nbm.mutate(camp, lambda nb: setattr(nb.checkpoints, "every_updates", 2))
    monkeypatch.setenv("COCKPIT_FAKE_FREE_MIB", "0.001")
    rid, rdir = launch.new_run(camp, None, 0, kind="train", overrides={"updates": 6})
    assert launch.wait(rdir, timeout=240)
    row = next(r for r in runs.view(nbm.load(camp)) if r.id == rid)
    assert row.status == "stopped" and "disk full soon" in row.stop_reason, row
    assert "after 2 of 6 updates" in row.stop_reason
    assert not (rdir / runs.CHECKPOINT).exists()
    end = [json.loads(x) for x in (rdir / "events.jsonl").read_text().splitlines() if '"run_end"' in x][-1]
    assert end["status"] == "stopped"
