"""Which git commit holds a folder or a file, and whether it has uncommitted changes. No torch, no textual.

One reader of git for the run's frozen record (``run.toml``'s ``revisions``) and the archive's manifest; each
writes the answer in its own, already published, shape.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

NO_GIT = "git not available"
NOT_A_CHECKOUT = "not a git checkout"


class NoGit(Exception):
    """The git program could not be run (not installed, or it hung)."""


def git(folder: Path, *args: str, timeout: float = 20) -> str | None:
    """git's output in ``folder``, stripped; None when git says no (not a checkout). :class:`NoGit` when git is absent."""
    try:
        proc = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NoGit(str(exc)) from None
    return proc.stdout.strip() if proc.returncode == 0 else None


@dataclass(frozen=True)
class Revision:
    repository: str  # the checkout's top folder
    commit: str
    dirty: bool  # uncommitted changes: in ``path`` when one was asked about, else in any tracked file


def revision(folder: Path, path: Path | None = None, timeout: float = 20) -> Revision | str:
    """The commit holding ``folder`` (and ``path`` in it), or why there is none (:data:`NO_GIT`, :data:`NOT_A_CHECKOUT`)."""
    try:
        top = git(folder, "rev-parse", "--show-toplevel", timeout=timeout)
        commit = git(folder, "rev-parse", "HEAD", timeout=timeout) if top else None
        if not top or not commit:
            return NOT_A_CHECKOUT
        if path is not None:
            status = git(Path(top), "status", "--porcelain", "--", str(path), timeout=timeout)
        else:
            status = git(folder, "status", "--porcelain", "--untracked-files=no", timeout=timeout)
    except NoGit:
        return NO_GIT
    return Revision(top, commit, bool((status or "").strip()))


class RunRevision(TypedDict, total=False):
    git: str  # the commit, or why there is none
    dirty: bool


def run_revision(where: Path) -> RunRevision:
    """The git commit of the folder holding the campaign (and so usually the task code), at run time."""
    rev = revision(where, timeout=10)
    if isinstance(rev, str):
        return {"git": rev}
    return {"git": rev.commit, "dirty": rev.dirty}


class FileRevision(TypedDict):
    repository: str
    commit: str
    path: str
    uncommitted_changes: bool


def file_revision(path: Path | None) -> FileRevision | str:
    """The commit holding ``path``, and whether that file has uncommitted changes."""
    if path is None:
        return "source file not found"
    rev = revision(path if path.is_dir() else path.parent, path)
    if isinstance(rev, str):
        return NOT_A_CHECKOUT  # the archive's manifest has always said so when git itself is missing too
    return {"repository": rev.repository, "commit": rev.commit, "path": str(path), "uncommitted_changes": rev.dirty}
