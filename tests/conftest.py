"""Fixtures shared by the whole suite: the repository root and a copy of the demo campaign."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "campaigns" / "demo"


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def demo_text() -> str:
    return (DEMO / "campaign.toml").read_text("utf-8")


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    """A writable copy of the demo campaign's notebook (no runs), as a folder."""
    folder = tmp_path / "campaigns" / "demo"
    folder.mkdir(parents=True)
    shutil.copy(DEMO / "campaign.toml", folder / "campaign.toml")
    return folder
