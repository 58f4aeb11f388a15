"""The pilot's phases, in the order it runs them: one module per phase, one list here.

Each module exposes a :class:`~cockpit.pilot.gate.Phase` (its name, checks,
remedy, whether later phases may run after it fails, and its function over
the shared context). ``cockpit.events.PHASES`` lists the same names for
readers that must not import torch; a test checks that the two agree.
"""

from __future__ import annotations

from ..gate import Phase
from . import (
    accumulation,
    data,
    export,
    leakage,
    overfit,
    resume,
    save,
    stack,
    steps,
    updates,
    validation,
    worst_case,
)

PHASES: tuple[Phase, ...] = (
    stack.PHASE,
    data.PHASE,
    leakage.PHASE,
    steps.FORWARD,
    steps.BACKWARD,
    updates.UPDATE_FIRST,
    updates.UPDATE_SECOND,
    accumulation.PHASE,
    worst_case.PHASE,
    overfit.PHASE,
    validation.PHASE,
    save.PHASE,
    resume.PHASE,
    export.PHASE,
)

BY_NAME: dict[str, Phase] = {p.name: p for p in PHASES}
