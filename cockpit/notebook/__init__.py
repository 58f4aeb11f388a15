"""The campaign notebook: ``campaigns/<name>/campaign.toml``, read and written only here.

- :mod:`.model`  the typed sections (dataclasses) and the notebook's errors
- :mod:`.parse`  TOML into the model, every problem in one message (file, line or key path, what to do)
- :mod:`.check`  the value checks (ranges, choices, ids, references)
- :mod:`.store`  the one way to write it: locked, atomic, never over another editor's change

Comments are not kept when Cockpit saves the file: use the ``notes`` fields instead.
"""

from __future__ import annotations

from .model import (
    CAMPAIGN_KINDS,
    DECISION_KINDS,
    HELD,
    LOCK_FILE,
    NOTEBOOK_FILE,
    PRECISIONS,
    REQUIRED_SECTIONS,
    RUN_KINDS,
    SCRIPT_VARIANT,
    SECTIONS,
    STRATEGIES,
    BatchSpec,
    CampaignInfo,
    CheckpointSpec,
    ClusterSpec,
    Conclusion,
    ConflictError,
    Decision,
    Notebook,
    NotebookError,
    PilotSpec,
    ProbeSpec,
    Rental,
    RunRow,
    Selection,
    StopRules,
    TaskSpec,
    TrainingSpec,
    ValidationSpec,
    Variant,
    names_reference,
    probe_campaign_sections,
    reference_words,
    role_words,
)
from .parse import find, load, parse
from .settings import Settings
from .store import create, dumps, locked, mutate, save, task_template, template, to_dict, validate

__all__ = [
    "names_reference",
    "probe_campaign_sections",
    "reference_words",
    "role_words",
    "CAMPAIGN_KINDS",
    "Settings",
    "DECISION_KINDS",
    "HELD",
    "LOCK_FILE",
    "NOTEBOOK_FILE",
    "PRECISIONS",
    "REQUIRED_SECTIONS",
    "RUN_KINDS",
    "SCRIPT_VARIANT",
    "SECTIONS",
    "STRATEGIES",
    "BatchSpec",
    "CheckpointSpec",
    "CampaignInfo",
    "Conclusion",
    "ConflictError",
    "Decision",
    "Notebook",
    "NotebookError",
    "PilotSpec",
    "ClusterSpec",
    "ProbeSpec",
    "Rental",
    "RunRow",
    "Selection",
    "StopRules",
    "TaskSpec",
    "TrainingSpec",
    "ValidationSpec",
    "Variant",
    "create",
    "dumps",
    "find",
    "load",
    "locked",
    "mutate",
    "parse",
    "save",
    "task_template",
    "template",
    "to_dict",
    "validate",
]
