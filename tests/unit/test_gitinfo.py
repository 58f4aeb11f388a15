"""One reader of git (cockpit/gitinfo.py) for the run's frozen record and the archive's manifest."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cockpit import archive, gitinfo, runs


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "task.py").write_text("x = 1\n")
    (tmp_path / "other.py").write_text("y = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_the_run_record_and_the_archive_read_the_same_commit_each_in_its_own_shape(checkout: Path) -> None:
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = head.stdout.strip()
    assert runs.git_revision(checkout) == {"git": commit, "dirty": False}
    assert archive.git_revision(checkout / "task.py") == {
        "repository": str(checkout.resolve()),
        "commit": commit,
        "path": str(checkout / "task.py"),
        "uncommitted_changes": False,
    }
    (checkout / "other.py").write_text("y = 2\n")  # the tree is dirty; the task file is not
    assert runs.git_revision(checkout)["dirty"] is True
    rev = archive.git_revision(checkout / "task.py")
    assert isinstance(rev, dict) and rev["uncommitted_changes"] is False


def test_outside_a_checkout_each_says_so(tmp_path: Path) -> None:
    assert runs.git_revision(tmp_path) == {"git": gitinfo.NOT_A_CHECKOUT}
    assert archive.git_revision(tmp_path / "task.py") == gitinfo.NOT_A_CHECKOUT
    assert archive.git_revision(None) == "source file not found"


def test_without_the_git_program_the_run_record_says_git_is_not_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert runs.git_revision(tmp_path) == {"git": gitinfo.NO_GIT}
    assert archive.git_revision(tmp_path / "task.py") == gitinfo.NOT_A_CHECKOUT
