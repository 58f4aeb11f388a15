"""A stop that lands between any two bytecodes of ``fsutil.atomic_writer`` leaves no temporary behind.

CPython runs a signal's Python handler where the interpreter checks its "eval breaker": after a call returns,
at a backward jump and where a frame resumes. Raising from an opcode trace right after each such instruction of
the writer's own frame is where a SIGTERM's ``Stopped`` can appear. The random-moment test in
``test_hostile_faults.py`` hit the window after ``mkstemp`` about once in twenty runs; this one walks every
such point.
"""

from __future__ import annotations

import dis
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from cockpit import fsutil


class Stop(BaseException):
    pass


CODE = fsutil.atomic_writer.__wrapped__.__code__  # type: ignore[attr-defined]
BREAKERS = {"CALL", "CALL_FUNCTION_EX", "JUMP_BACKWARD", "RESUME"}  # instructions after which a handler can run


def _write_stopped_at(path: Path, n: int) -> bool:
    """Write ``path`` with a stop raised at the writer's ``n``-th instruction; whether the stop was raised."""
    seen = [0]
    raised = [False]
    last = [-1]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            before, last[0] = last[0], frame.f_lasti
            if before >= 0 and dis.opname[CODE.co_code[before]] in BREAKERS:
                seen[0] += 1
                if seen[0] == n:
                    raised[0] = True
                    raise Stop
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is CODE:
            frame.f_trace_opcodes = True
            return local
        return None

    sys.settrace(tracer)
    try:
        with fsutil.atomic_writer(path) as fh:
            fh.write(b"new")
    except Stop:
        pass
    finally:
        sys.settrace(None)
    return raised[0]


def test_a_stop_at_any_point_of_the_writer_leaves_the_old_file_or_the_new_and_no_temporary(
    tmp_path: Path,
) -> None:
    if sys.gettrace() is not None:
        pytest.skip("a tracer (coverage, a debugger) is already installed; this test needs its own")
    target = tmp_path / "model.pt"
    n = 0
    while True:
        n += 1
        target.write_bytes(b"old")
        raised = _write_stopped_at(target, n)
        left = fsutil.temporaries(tmp_path)
        assert not left, f"a stop after call {n} of atomic_writer left {left}"
        assert target.read_bytes() in (b"old", b"new"), f"a stop after call {n} left {target.read_bytes()!r}"
        if not raised:
            break
    assert n > 10  # every call of the writer, through os.replace, was a point a stop landed
