"""TrainCheck's reproductions of real silent training errors (tests/traincheck/), each probed as a user would:
the buggy script caught with its cause named at the expected phase, the fixed one clean (no failed or warned
check). The table of all of them: ``python -m tests.traincheck.table``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.traincheck.table import REPRODUCTIONS, Reproduction, row

# Slow: each reproduction is two real probes, two script processes (the DDP ones start a second rank under gloo),
# each importing torch: seconds to tens of seconds apiece on a loaded 2-core machine.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("r", REPRODUCTIONS, ids=[r.id for r in REPRODUCTIONS])
def test_caught_when_buggy_and_clean_when_fixed(r: Reproduction, tmp_path: Path) -> None:
    x = row(r, tmp_path)
    assert x.named, (f"{r.phase} / {r.check} ({r.verdict}) should say {r.words!r}", x.buggy)
    assert x.buggy.status == ("failed" if r.verdict == "fail" else "passed"), x.buggy
    assert x.fixed.clean, x.fixed
