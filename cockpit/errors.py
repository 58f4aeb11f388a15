"""User-facing errors: one paragraph that names the file, field or phase and what to do.

Commands raise these; ``cockpit.cli`` prints them without a traceback and
exits with ``exit_code``. Anything else escaping a command is a bug in Cockpit.
"""

from __future__ import annotations


class CockpitError(Exception):
    exit_code = 2


class UsageError(CockpitError):
    exit_code = 2
