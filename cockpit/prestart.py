"""What is checked before a pilot starts, the one way: the CLI's ``cockpit pilot``, its ``--all`` and the TUI's
``p`` all ask :func:`before_pilot` (and ``cockpit check`` reads the same child's findings). No torch.

The notebook loads and names a task (not a probe campaign); ``[task] entry`` names a file or module that exists;
the variant exists; then a child process (``python -m cockpit.pilot.taskcheck``) imports the task, sizes its
splits, builds the model and makes one batch. A problem is refused here, before a run folder or a notebook row
exists, in one paragraph naming the file and line or the setting to change (:class:`~cockpit.errors.UsageError`,
exit 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import notebook as nbm
from .errors import UsageError
from .runs import TomlValue

TASK_CHECK_TIMEOUT_S = 900.0  # a task whose datasets() reads a large corpus takes a while; a hung one does not pass
NOTHING_STARTED = "nothing was started: "


def before_pilot(
    campaign: Path | str, variant: str | None = None, overrides: dict[str, TomlValue] | None = None
) -> nbm.Notebook:
    """Every check a pilot passes before it exists; raises the first problem found (UsageError, NotebookError)."""
    nb = nbm.load(campaign)
    nb.needs_task("a pilot")
    missing = task_missing(nb)
    if missing:
        raise UsageError(f"{NOTHING_STARTED}{nb.path}: task.entry: {missing}")
    vid = variant or nb.reference.id
    nb.variant(vid)  # an unknown variant is named before the task is imported
    refuse(nb, [vid], overrides or {}, NOTHING_STARTED)
    return nb


def task_check(nb: nbm.Notebook, variants: list[str] | None, overrides: dict[str, TomlValue]) -> dict[str, Any]:
    """Import the task, size its splits, build its model and make one batch, in a child process (this process
    imports neither torch nor user code). The child's findings (:class:`cockpit.pilot.taskcheck.TaskCheck`)."""
    cmd = [sys.executable, "-m", "cockpit.pilot.taskcheck"]
    if overrides:
        cmd += ["--overrides", json.dumps(overrides, default=str)]
    cmd += [str(nb.path), *(variants or [])]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TASK_CHECK_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {
            "problems": [
                {
                    "where": str(nb.path),
                    "what": f"importing the task and reading its splits took over {TASK_CHECK_TIMEOUT_S:.0f} s; "
                    "make datasets() lazy, or skip this check with --no-task",
                }
            ]
        }
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        out = json.loads(last[0])
    except ValueError:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])[:600]
        return {
            "problems": [
                {"where": str(nb.path), "what": f"the task could not be checked (exit {proc.returncode}): {tail}"}
            ]
        }
    return out if isinstance(out, dict) else {"problems": []}


def problems_of(found: dict[str, Any]) -> list[str]:
    return [f"{p['where']}: {p['what']}" for p in found.get("problems", [])]


def refuse(
    nb: nbm.Notebook, variants: list[str] | None, overrides: dict[str, TomlValue], lead: str = ""
) -> dict[str, Any]:
    """Raise the problems the task check found, one paragraph each, before anything is written; else return the
    child's findings."""
    found = task_check(nb, variants, overrides)
    problems = problems_of(found)
    if problems:
        raise UsageError(lead + "\n".join(problems))
    return found


def task_missing(nb: nbm.Notebook) -> str:
    """What is wrong with ``[task] entry`` that can be told without importing it (so without torch), or ""."""
    entry = nb.task.entry
    where = entry.rpartition(":")[0]
    if where.endswith(".py"):
        cands = [Path(where)] if Path(where).is_absolute() else [nb.directory / where, Path(where)]
        if any(c.is_file() for c in cands):
            return ""
        looked = " and ".join(dict.fromkeys(str(c) for c in cands))
        return (
            f"the task file {where!r} does not exist (looked for {looked}); a path in the entry is relative "
            "to the campaign folder or the current folder. Fix the path, then run `cockpit check` again."
        )
    if module_found(where, [str(nb.directory), str(Path.cwd())]):
        return ""
    return (
        f"no module {where!r} can be found next to the campaign, in the current folder or on the Python path; "
        "check the spelling (or write a file path ending in .py), then run `cockpit check` again."
    )


def module_found(name: str, first: list[str]) -> bool:
    """Whether module ``name`` exists, found without running it (the run puts the campaign folder and the
    current folder on its path, as here)."""
    import importlib.machinery
    import importlib.util

    parts = [p for p in name.split(".") if p]
    if not parts:
        return False
    spec = importlib.machinery.PathFinder.find_spec(parts[0], [*first, *sys.path])
    if spec is None:
        try:  # an editable install has a finder of its own: the top-level package is enough then
            return importlib.util.find_spec(parts[0]) is not None
        except (ImportError, ValueError):
            return False
    for part in parts[1:]:
        locations = spec.submodule_search_locations
        if locations is None:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(locations))
        if spec is None:
            return False
    return True
