"""A series: every chosen variant x seed trained at the campaign's fixed budget. No torch.

Each item becomes a new training run (``kind = "train"``, its own id, started
detached like a pilot) through :func:`cockpit.launch.new_run`; items run one
after another, or ``parallel`` at a time. The plan is made before anything
starts, so the same list is shown, run and recorded:

- a variant x seed that already has a train run gets a new run that names the
  latest of them in ``follows``: nothing is replaced, the lineage is explicit;
- ``rerun`` ids make a new run of the same variant and seed following that run;
- a budget override (``--updates N``) is written into the run's frozen
  parameters, so a quick look is never mistaken for the campaign's budget.

:class:`Series` is non-blocking (``poll()``) so the TUI can drive it on a
timer; :meth:`Series.run` is the blocking loop the CLI uses.

- :mod:`.items`   the plan: items, seeds, budget overrides, the runs that can be resumed
- :mod:`.checks`  the guard a series passes before it starts: pilots, failures, protocol, disk, parallel runs
- :mod:`.running` the running series: start, poll, stop, and one result line per run
"""

from __future__ import annotations

from .checks import (
    BAD_ENDS,
    BUDGET_KEYS,
    CONTEXT_MIB,
    SHARED_SCALARS,
    Refused,
    disk_for_series,
    fit_parallel,
    guard,
    parallel_check,
    pilot_for,
    pilot_groups,
    record_decisions,
    repeated_failure,
)
from .items import Item, budget_overrides, default_variants, intended_params, parse_seeds, plan, resumable
from .running import Series, Started, in_background, result

__all__ = [
    "BAD_ENDS",
    "BUDGET_KEYS",
    "CONTEXT_MIB",
    "Item",
    "Refused",
    "Series",
    "Started",
    "budget_overrides",
    "default_variants",
    "disk_for_series",
    "fit_parallel",
    "guard",
    "in_background",
    "intended_params",
    "parallel_check",
    "parse_seeds",
    "SHARED_SCALARS",
    "pilot_for",
    "pilot_groups",
    "plan",
    "record_decisions",
    "repeated_failure",
    "result",
    "resumable",
]
