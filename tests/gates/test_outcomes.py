"""One classification of how a run or a phase ended: the pilot's phase failures and the run process's outcome agree
on the kind of ending, each in its own words; one set of bad endings; one spelling of run_end's fields."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from cockpit import events as ev
from cockpit.pilot.context import Context
from cockpit.pilot.gate import Gate
from cockpit.pilot.phases import BY_NAME
from cockpit.pilot.pilot import phase_failed
from cockpit.pilot.process import Cause, cause_of, outcome_of
from cockpit.pilot.task import TaskError
from cockpit.pilot.usercode import NonFinite, UserCodeError
from tests.gates.test_phases import PARAMS, classifier


def _full_in_user_code() -> UserCodeError:
    try:
        raise OSError(errno.ENOSPC, "No space left on device", "ckpt.pt")
    except OSError as exc:
        try:
            raise UserCodeError("save", exc) from exc
        except UserCodeError as wrapped:
            return wrapped


CASES = [
    (NonFinite("loss", float("nan"), 1), Cause.NON_FINITE, ev.Status.DIVERGED, ev.Status.DIVERGED),
    (UserCodeError("loss", ValueError("bad")), Cause.USER_CODE, ev.Status.ERROR, ev.Status.ERROR),
    # a phase that cannot run on this task is a failed gate; a whole run that cannot start is a usage error
    (TaskError("no val split"), Cause.TASK, ev.Status.FAILED, ev.Status.ERROR),
    (torch.OutOfMemoryError("CUDA out of memory"), Cause.OOM, ev.Status.OOM, ev.Status.OOM),
    (_full_in_user_code(), Cause.DISK_FULL, ev.Status.ERROR, ev.Status.ERROR),
    (RuntimeError("oops"), Cause.INTERNAL, ev.Status.ERROR, ev.Status.ERROR),
]


@pytest.mark.parametrize(("exc", "cause", "phase_status", "run_status"), CASES, ids=[c[1].name for c in CASES])
def test_phase_and_run_classify_alike(
    exc: BaseException, cause: Cause, phase_status: ev.Status, run_status: ev.Status, tmp_path: Path
) -> None:
    assert cause_of(exc) is cause
    ctx = Context.in_memory(classifier(), PARAMS, rdir=tmp_path)
    phase = BY_NAME["forward"]
    ended = phase_failed(ctx, phase, Gate("forward", {}), exc)
    run = outcome_of(exc, "in forward")
    assert (ended.outcome.status, run.status) == (phase_status, run_status)
    if cause is Cause.DISK_FULL:  # the task's code raised it, but the disk is what the user must fix
        assert ended.outcome.code == run.code == ev.ExitCode.DISK_FULL


def test_one_set_of_bad_endings() -> None:
    from cockpit.series.checks import BAD_ENDS

    assert {"failed", "diverged", "oom", "error", "crashed"} == ev.BAD_ENDINGS
    assert ev.BAD_ENDINGS - {"crashed"} == BAD_ENDS  # killed from outside: may run again with the same settings
    assert all(s in ev.FINAL_STATUSES for s in map(ev.Status, ev.BAD_ENDINGS))


def test_run_end_fields() -> None:
    out = ev.Outcome.of(ev.Status.STOPPED, "stopped by signal (SIGTERM) in save")
    assert ev.run_end_fields(out, "save") == {
        "status": "stopped",
        "stop_reason": "stopped by signal (SIGTERM) in save",
        "phase": "save",
        "message": "stopped by signal (SIGTERM) in save",
        "exit_code": int(ev.ExitCode.STOPPED),
    }


def _raised_in_cockpit(src: str) -> BaseException:
    """What a piece of Cockpit's own code (compiled under a file name in the cockpit package) raised."""
    import os

    import cockpit

    scope: dict[str, object] = {"torch": torch}
    exec(compile(src, os.path.join(os.path.dirname(cockpit.__file__), "pilot", "microsteps.py"), "exec"), scope)
    try:
        scope["run"]()  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 - the test classifies it
        return exc
    raise AssertionError("did not raise")


def test_cockpits_backward_on_a_graph_kept_from_the_last_batch_is_the_users(tmp_path: Path) -> None:
    """Issue 35, class 8: torch refuses a backward through a freed graph the task's state kept: the user's (exit
    5, the state and .detach() named), where a plain error in the same Cockpit code stays Cockpit's (exit 6)."""
    kept = _raised_in_cockpit(
        "def run():\n    w = torch.ones(2, requires_grad=True)\n    h = (w * 2).tanh()\n"
        "    h.sum().backward()\n    h.sum().backward()\n"
    )
    assert cause_of(kept) is Cause.USER_CODE
    ctx = Context.in_memory(classifier(), PARAMS, rdir=tmp_path)
    ended = phase_failed(ctx, BY_NAME["update_second"], g := Gate("update_second", {}), kept)
    assert ended.outcome.code == ev.ExitCode.USER_ERROR == outcome_of(kept, "in update_second").code
    assert ended.outcome.reason.startswith("state kept across batches in update_second: `.detach()` the state")
    assert "bug in Cockpit" not in (g.message or "") and g.remedy.startswith("`.detach()`")

    bug = _raised_in_cockpit("def run():\n    return {}['x']\n")
    assert cause_of(bug) is Cause.INTERNAL
    ended = phase_failed(ctx, BY_NAME["update_second"], Gate("update_second", {}), bug)
    assert ended.outcome.code == ev.ExitCode.INTERNAL == outcome_of(bug, "in update_second").code
