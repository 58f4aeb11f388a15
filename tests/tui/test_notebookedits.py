"""Notebook edits from the TUI: saved at once; a change made meanwhile is never overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit.tui import notebookedits as edits


def test_verdict_refuses_when_the_file_changed_meanwhile(recorded: Path):
    seen = nbm.load(recorded).run("r0001").verdict
    nbm.mutate(recorded, lambda nb: setattr(nb.run("r0001"), "verdict", "rerun"))
    with pytest.raises(nbm.ConflictError, match="rerun"):
        edits.set_verdict(recorded / "campaign.toml", "r0001", seen, "keep")
    assert nbm.load(recorded).run("r0001").verdict == "rerun"


def test_note_merges_into_a_newer_file(recorded: Path):
    nb = nbm.load(recorded)
    nbm.mutate(recorded, lambda n: setattr(n.run("r0002"), "verdict", "reject"))
    saved = edits.add_note(recorded / "campaign.toml", nb.digest, "observation", "host memory", ["r0002"])
    assert saved.merged
    after = nbm.load(recorded)
    assert after.run("r0002").verdict == "reject"
    assert after.decisions[-1].text == "host memory"


def test_note_with_unknown_run_is_refused(recorded: Path):
    nb = nbm.load(recorded)
    with pytest.raises(nbm.NotebookError, match="r9999"):
        edits.add_note(recorded / "campaign.toml", nb.digest, "decision", "x", ["r9999"])


def test_selection_fields_parse_and_conflict(recorded: Path):
    nb = nbm.load(recorded)
    with pytest.raises(nbm.NotebookError, match="memory_per_gpu_mib"):
        edits.parse_selection({"memory_per_gpu_mib": "lots"})
    values = edits.parse_selection({"memory_per_gpu_mib": "1800", "microbatch": "2", "gpu": "L4"})
    edits.set_selection(recorded / "campaign.toml", nb.selection, values)
    assert nbm.load(recorded).selection.microbatch == 2
    with pytest.raises(nbm.ConflictError):  # based on the old reading again
        edits.set_selection(recorded / "campaign.toml", nb.selection, {"gpu": "H200"})
    assert nbm.load(recorded).selection.gpu == "L4"
