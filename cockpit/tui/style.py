"""Every colour that carries a meaning in the TUI, each with its word.

A status, a verdict or a check is never shown by colour alone: the word is
always written, the colour only repeats it (a terminal without colour, or a
reader who does not tell red from green, loses nothing). The words are the
CLI's: a run's status as ``cockpit runs`` prints it, a gate's verdict and a
check's result as ``cockpit pilot`` and ``cockpit inspect`` print them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from .. import events as ev
from .. import styles
from ..schema import Check, Event

# Status, verdict and check words and colours are the CLI's too: one table (cockpit/styles.py).
STATUS_STYLE = styles.STATUS_STYLE
VERDICT_STYLE = styles.VERDICT_STYLE
VERDICT_WORD = styles.VERDICT_WORD
CHECK_STYLE = styles.CHECK_STYLE
BAD_STATUSES = ev.BAD_ENDINGS | {"unreadable"}  # the one set of bad endings, and a run that cannot be read

# Other meanings
RUNNING = "bold cyan"  # a phase or a run in progress
PENDING = "dim"  # not reached yet
BEST = "bold green"  # the best validation point
PEAK = "bold red"  # the phase that sets a run's peak memory
NOTE_KIND_STYLE = {"decision": "bold yellow", "observation": "bold cyan"}


def status_text(status: str) -> Text:
    """A run's status: the word, in its colour."""
    return Text(status, style=STATUS_STYLE.get(status, ""))


def verdict_text(verdict: str | None) -> Text:
    """A gate's verdict: the word, in its colour; ``...`` while the gate has not ended."""
    if not verdict:
        return Text("...", style=PENDING)
    return Text(VERDICT_WORD.get(verdict, verdict), style=VERDICT_STYLE.get(verdict, ""))


def check_result(check: Check) -> str:
    """``pass``, ``warn``, ``fail`` or ``n/a``: a check that did not hold is a warning when it is marked ``warn``;
    one whose precondition did not hold measured nothing (``na``)."""
    if check.get("na"):
        return "n/a"
    if check.get("ok"):
        return "pass"
    return "warn" if check.get("warn") else "fail"


@dataclass(frozen=True)
class GateView:
    """A gate as shown: the verdict's word and colour, and whether its remedy applies."""

    word: str
    style: str
    remedy: bool


def gate_view(gate: Event, end: Event | None) -> GateView:
    """A phase a person stopped reads "stopped", not a failure with a failure's remedy.

    The pilot records the phase a SIGTERM interrupted as a failed gate with a failed
    ``stopped`` check; the run itself ends ``stopped``.
    """
    checks = gate.get("checks") or []
    stopped_check = any(isinstance(c, dict) and c.get("name") == "stopped" and not c.get("ok") for c in checks)
    end_stopped = end is not None and end.get("status") == "stopped" and end.get("phase") in (None, gate.get("phase"))
    if stopped_check or (end_stopped and gate.get("verdict") == "fail"):
        return GateView("stopped", STATUS_STYLE["stopped"], False)
    verdict = str(gate.get("verdict") or "")
    return GateView(VERDICT_WORD.get(verdict, verdict), VERDICT_STYLE.get(verdict, ""), verdict in ("fail", "warn"))
