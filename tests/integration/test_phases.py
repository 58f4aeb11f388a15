"""Each phase's checks run in this process on a tiny in-memory task: no subprocess, no run folder, no notebook: the
tests that start processes or load models (the rest: tests/gates/test_phases.py)."""

from __future__ import annotations

import pytest

from cockpit.pilot.context import Context
from cockpit.pilot.phases import PHASES
from cockpit.pilot.pilot import run_phase
from tests.gates.test_phases import PARAMS, check, lm, through


@pytest.mark.slow  # trains a model until the mask's leak shows
def test_causal_mask_that_sees_the_future_fails_forward() -> None:
    good = through(lm(), "forward")["forward"]
    assert check(good, "causal mask")["ok"] and check(good, "outputs are logits")["ok"]
    ctx = Context.in_memory(lm(), {**PARAMS, "peek": True})
    for phase in PHASES[:4]:
        g, _ = run_phase(ctx, phase)
    c = check(g, "causal mask")
    assert g.phase == "forward" and not c["ok"] and "sees later tokens" in c["detail"]
