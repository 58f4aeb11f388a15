"""Archive a run for safekeeping, and load it back safely.

``gather`` copies what someone needs to trust and reuse a run without the
campaign folder: the evaluation artifact (weights as a state_dict, never the
optimizer state: a run without an export gives the model state of its final
checkpoint; an adapter over a frozen base gives the adapter only, with the
base's identity), the control outputs, the frozen run.toml and the notebook
variant's configuration, the revisions (git commit and SHA-256 of the task
code, package versions, the data revision), the raw metrics, a README with
reload instructions, and a ``manifest.json`` with the SHA-256 of every file.
It writes into a temporary folder and renames it at the end, so a
half-written archive never looks complete.

``load`` checks every hash first (a changed, missing or added file is refused
before anything is unpickled), then loads the weights with
``cockpit.pilot.checkpoint.safe_load`` (``torch.load(weights_only=True)``),
which refuses a pickled object. ``verify`` does that, then rebuilds the model
with the archived task reference and parameters (an adapter only over the
recorded base) and replays the control inputs against the recorded outputs.
Only these functions import torch, lazily.

- :mod:`.layout` the names of the archive's files, and ``ArchiveError``
- :mod:`.pack`   ``gather`` and the revisions it records, with its link and manifest safety
- :mod:`.check`  ``check_hashes``, ``load``, ``verify`` and the replay
"""

from __future__ import annotations

from ..fsutil import sha256
from .check import Verified, check_hashes, load, rebuild_and_replay, verify
from .layout import (
    ARTIFACT_MANIFEST,
    CHECKPOINT,
    CONTROL,
    FORMAT,
    MANIFEST,
    METRIC_JSON,
    METRIC_SUFFIXES,
    MODEL,
    ArchiveError,
)
from .pack import default_out, gather, git_revision, revisions, task_source

__all__ = [
    "ARTIFACT_MANIFEST",
    "CHECKPOINT",
    "CONTROL",
    "FORMAT",
    "MANIFEST",
    "METRIC_JSON",
    "METRIC_SUFFIXES",
    "MODEL",
    "ArchiveError",
    "Verified",
    "check_hashes",
    "default_out",
    "gather",
    "git_revision",
    "load",
    "rebuild_and_replay",
    "revisions",
    "sha256",
    "task_source",
    "verify",
]
