"""The names of an archive's files, and the error an archive raises.

Both halves of ``cockpit.archive`` use them: ``pack`` writes these files and
``check`` reads them back, so the layout is stated once.
"""

from __future__ import annotations

from ..errors import CockpitError

FORMAT = "cockpit-archive/1"
MANIFEST = "manifest.json"
MODEL = "model/model.pt"
CONTROL = "model/control.pt"
ARTIFACT_MANIFEST = "model/artifact_manifest.json"
CHECKPOINT = "model/checkpoint.pt"  # archives written before the model state was taken out of the checkpoint
METRIC_SUFFIXES = (".jsonl", ".csv")
METRIC_JSON = ("metrics.json", "replay.json", "resume.json")


class ArchiveError(CockpitError):
    """An archive that cannot be written, or one that fails verification."""

    exit_code = 1
