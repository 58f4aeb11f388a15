"""Every status, verdict and check word with its colour: one table for the CLI (rich) and the TUI.

Pure data (no rich, no textual, no torch), so the pilot side, the CLI's commands and the TUI all read it. A colour
only repeats the word: the word is always written. Styles are rich style strings.
"""

from __future__ import annotations

# A run's status (cockpit.events.Status), as written in events and the notebook, and as `cockpit runs` prints it.
# The order is the TUI's sort order of statuses.
STATUS_STYLE = {
    "created": "dim",
    "running": "bold cyan",
    "reading": "dim",  # the TUI is still reading the run's history: not known yet
    "passed": "bold green",
    "completed": "green",
    "failed": "bold red",
    "diverged": "bold red",
    "oom": "bold red",
    "error": "bold red",
    "stopped": "yellow",
    "crashed": "bold magenta",  # the process is gone without a final event: told apart from a failure it reported
    "unreadable": "bold magenta",  # the TUI could not make sense of the run's events
}

# A gate's verdict (cockpit.events.Verdict) and the word shown for it.
VERDICT_STYLE = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red", "skipped": "dim", "n/a": "dim"}
VERDICT_WORD = {"pass": "pass", "warn": "warn", "fail": "fail", "skipped": "skipped", "n/a": "n/a"}

# One check of a gate: its result in the CLI's words.
CHECK_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "n/a": "dim"}

UNKNOWN = "dim"  # a verdict or status this table does not know (a file from another version)


def status_style(status: str) -> str:
    """The colour of a run's status word; none for a status this table does not know."""
    return STATUS_STYLE.get(status, "")


def verdict_style(verdict: str) -> str:
    """The colour of a gate's verdict word; dim for a verdict this table does not know."""
    return VERDICT_STYLE.get(verdict, UNKNOWN)
