"""Issue 14, item 5: faults named as what they are.

- a SIGTERM that lands inside ``torch.save`` (a checkpoint or an export) is a stop (exit 7), although
  torch turns the exception into a RuntimeError on its way up;
- a SIGTERM right after the run process starts, before its handlers exist, is a stop, not a crash;
- a full disk is "disk full" (status error, exit 10), and creating a run on a full disk leaves no folder,
  no row and uses up no id;
- a series run killed in its final save says phase "save";
- a series sequencer that gets SIGTERM lists the runs it did not start;
- the TUI exits non-zero after an unhandled exception.
"""

from __future__ import annotations

import errno
import json
import textwrap
from pathlib import Path

import pytest

from cockpit import events as ev
from cockpit import fsutil, runs
from tests.fake_runs import make_campaign


def test_a_stop_torch_turned_into_a_runtime_error_is_still_a_stop() -> None:
    from cockpit.pilot import signals
    from cockpit.pilot.process import outcome_of

    try:
        try:
            raise signals.Stopped("SIGTERM")
        except signals.Stopped:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")  # noqa: B904
    except RuntimeError as exc:
        out = outcome_of(exc, "during save")
    assert out.status == ev.Status.STOPPED and out.code == ev.ExitCode.STOPPED
    assert out.reason.startswith("stopped by signal")


def test_a_full_disk_is_named_disk_full() -> None:
    import torch

    from cockpit.pilot.process import outcome_of

    with pytest.raises(Exception) as err, open("/dev/full", "wb") as fh:  # every write: ENOSPC
        torch.save({"w": torch.zeros(100_000)}, fh)
    out = outcome_of(err.value, "during save")
    assert out.status == ev.Status.ERROR and out.code == ev.ExitCode.DISK_FULL
    assert out.reason.startswith("disk full")
    assert fsutil.disk_full(OSError(errno.ENOSPC, "No space left on device")) is not None


def test_a_killed_series_run_in_its_final_save_says_save(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    rid, rdir = runs.create_run(camp, kind="train")
    w = ev.EventWriter(rdir / ev.EVENTS_FILE)
    w.emit(ev.RUN_START, run_id=rid, run_kind="train", world=1)
    w.emit(ev.PHASE_START, phase="train", inputs={})
    for i in range(1, 4):
        w.emit(ev.STEP, step=i, loss=1.0, phase="train")
    w.emit(ev.PHASE_START, phase="save", inputs={"file": "checkpoint.pt"})
    w.close()
    (rdir / runs.PROCESS_FILE).write_text(json.dumps({"pid": 2**22 + 7, "create_time": 1.0, "cmdline": []}))
    st = runs.state(rdir)
    assert (st.status, st.phase) == ("crashed", "save")
    assert "during phase save" in st.stop_reason


def test_the_training_run_announces_its_final_save() -> None:
    """The run process emits phase_start "save" before it writes its last checkpoint (what the test above reads)."""
    src = (Path(__file__).resolve().parents[2] / "cockpit" / "pilot" / "training.py").read_text()
    assert 'self.emit(ev.PHASE_START, phase="save"' in src


# --------------------------------------------------------------------------- real processes

TERM_IN_SAVE = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from cockpit.pilot import signals
    signals.install()
    import torch
    from cockpit.pilot import checkpoint as ck
    from cockpit.pilot.process import outcome_of
    out = Path(sys.argv[1])
    state = {"w": torch.randn(2_000_000), "o": torch.randn(2_000_000)}
    print("ready", flush=True)
    try:
        while True:
            ck.atomic_save(state, out / "checkpoint.pt")
            ck.export_artifact(torch.nn.Linear(300, 300), out / "artifact", {})
    except BaseException as exc:
        o = outcome_of(exc, "during save")
        print(json.dumps({"status": o.status.value, "code": int(o.code), "type": type(exc).__name__}), flush=True)
        sys.exit(int(o.code))
    """
)


# Installed in the run process through PYTHONPATH: SIGTERM arrives while numpy's C extension is
# loading a module (found on a CI run, 0.3 s after the start: the stop became a crash, exit 1,
# "ImportError: cannot load module more than once per process").
SIGTERM_INSIDE_NUMPY = """
import importlib.abc, os, signal, sys


class _StopInsideNumpy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "numpy.exceptions":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None


sys.meta_path.insert(0, _StopInsideNumpy())
"""
