"""A gate and a phase: the units the pilot is made of.

A **gate** is data (see ``cockpit.events``): the phase, its input parameters,
the checks it ran, the measurements taken within the same bounds, a verdict
and the remedy for a failure.

A **phase** is one unit of the pilot: its name, the checks it may run, its
remedy, whether later phases may still run after it fails, and one function
over the shared :class:`~cockpit.pilot.context.Context` that fills its gate.
The ordered list of phases is ``cockpit.pilot.phases.PHASES``; adding a phase
means writing one module and adding it there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import events as ev

if TYPE_CHECKING:
    from .context import Context


@dataclass
class Gate:
    phase: str
    inputs: dict[str, ev.JSON] = field(default_factory=dict)
    checks: list[ev.Check] = field(default_factory=list)
    message: str = ""
    remedy: str = ""
    skipped: bool = False
    extra: ev.GateExtras = field(default_factory=lambda: ev.GateExtras())

    def check(self, name: str, ok: bool, detail: str = "", warn: bool = False) -> bool:
        """Record one check. ``warn``: a failure of this check is a warning, not a failed gate."""
        c: ev.Check = {"name": name, "ok": bool(ok), "detail": detail}
        if warn:
            c["warn"] = True
        self.checks.append(c)
        return bool(ok)

    def fail(self, name: str, detail: str) -> None:
        self.check(name, False, detail)

    def not_applicable(self, name: str, why: str) -> None:
        """Record a check whose precondition does not hold here: it measured nothing, so it neither passes nor fails.

        ``why`` names the precondition and what this task has instead (shown in the gate's detail and in
        ``--json``). A gate whose checks are all not applicable has the verdict ``n/a``, never ``pass``.
        """
        self.checks.append({"name": name, "ok": True, "na": True, "detail": f"not applicable: {why}"})

    def failed(self, name: str) -> bool:
        return any(c["name"] == name and not c["ok"] for c in self.checks)

    @property
    def verdict(self) -> ev.Verdict:
        if self.skipped:
            return ev.Verdict.SKIPPED
        if any(not c["ok"] and not c.get("warn") for c in self.checks):
            return ev.Verdict.FAIL
        if any(not c["ok"] for c in self.checks):
            return ev.Verdict.WARN
        if self.checks and all(c.get("na") for c in self.checks):
            return ev.Verdict.NA
        return ev.Verdict.PASS

    def failures(self) -> list[ev.Check]:
        return [c for c in self.checks if not c["ok"] and not c.get("warn")]


Body = Callable[["Context", Gate], None]


def _no_inputs(ctx: Context) -> dict[str, ev.JSON]:
    return {}


@dataclass(frozen=True)
class Phase:
    """One phase of the pilot.

    ``run`` fills the gate (checks, inputs, extras) and may raise: the pilot
    turns every exception into the gate's failure and the run's outcome.
    ``independent``: a failure does not make later phases meaningless, so the
    pilot goes on (one run then shows every problem). ``after`` runs once the
    phase's measurement is taken, before the gate is recorded, outside the
    measured bounds: it gets the phase's own memory (ratios between phases).
    """

    name: str
    run: Body
    remedy: str
    checks: tuple[str, ...] = ()
    independent: bool = False
    inputs: Callable[[Context], Mapping[str, ev.JSON]] = _no_inputs
    after: Callable[[Context, Gate, ev.Mem], None] | None = None
    doc: str = ""
