"""The shelf's campaigns: one notebook per model, healthy and broken, written into a folder for a test."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

SHELF = Path(__file__).resolve().parent


@dataclass
class Case:
    entry: str  # "file.py:task" in tests/shelf
    params: dict[str, Any] = field(default_factory=dict)
    batch: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    pilot: dict[str, Any] = field(default_factory=dict)
    expect: str = "passed"  # the pilot's status
    gate: str = ""  # the gate a broken twin fails (or warns) at
    check: str = ""  # the check that names the cause
    verdict: str = "fail"  # "fail", or "warn" for a twin that only warns
    words: tuple[str, ...] = ()  # what the check's detail must say


BASE_BATCH = {"microbatch": 4, "accumulation": 2, "updates": 200, "eval_microbatch": 8}
BASE_PILOT = {"updates_after_resume": 1}

CASES: dict[str, Case] = {
    "nanogpt": Case(
        "nanogpt_task.py:task",
        {"block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64},
        training={"lr": 1e-3, "weight_decay": 0.1, "grad_clip": 1.0},
    ),
    "gpt2": Case(
        "hf_gpt2_task.py:task",
        {"max_length": 32, "n_layer": 2, "n_head": 2, "n_embd": 64, "train_examples": 256, "val_examples": 32},
        training={"lr": 1e-3},
    ),
    "bert": Case(
        "hf_bert_task.py:task",
        {"max_length": 16, "hidden": 32, "train_examples": 256, "val_examples": 48},
        training={"lr": 1e-3},
    ),
    "resnet": Case(
        "resnet_task.py:task",
        {"image_size": 32, "train_examples": 128, "val_examples": 32},
        batch={"microbatch": 8, "accumulation": 1, "eval_microbatch": 16},
        training={"lr": 1e-3},
    ),
    # broken twins: each fails (or warns) at its gate, naming what it found
    "nanogpt_uneven": Case(
        "nanogpt_uneven.py:task",
        {"block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64},
        training={"lr": 1e-3},
        expect="failed",
        gate="accumulation",
        check="accumulated == single batch",
        words=("mean per microbatch over uneven counts",),
    ),
    "gpt2_wrong_ignore": Case(
        "hf_gpt2_wrong_ignore.py:task",
        {"max_length": 32, "n_layer": 2, "n_head": 2, "n_embd": 64, "train_examples": 256, "val_examples": 32},
        training={"lr": 1e-3},
        expect="error",
        gate="data",
        check="targets in range",
        words=("label -1", "outside"),
    ),
    "bert_unfrozen": Case(
        "hf_bert_unfrozen.py:task",
        {"max_length": 16, "hidden": 32, "train_examples": 256, "val_examples": 48},
        training={"lr": 1e-3},
        expect="failed",
        gate="backward",
        check="trainable as declared",
        words=("trained anyway", "bert."),
    ),
    "resnet_accumulated": Case(
        "resnet_task.py:task",
        {"image_size": 32, "train_examples": 128, "val_examples": 32},
        batch={"microbatch": 4, "accumulation": 2, "eval_microbatch": 16},
        training={"lr": 1e-3},
        expect="passed",
        gate="accumulation",
        check="accumulated == single batch",
        verdict="warn",
        words=("BatchNorm",),
    ),
}


def write(folder: Path, name: str) -> Path:
    """campaigns/<name>/campaign.toml in ``folder`` for the case; returns the campaign folder."""
    case = CASES[name]
    camp = folder / "campaigns" / name
    camp.mkdir(parents=True, exist_ok=True)
    doc = {
        "campaign": {"name": name, "question": f"does {name} train as written?", "held_constant": "updates"},
        "task": {"entry": f"{SHELF / case.entry.split(':')[0]}:{case.entry.split(':')[1]}", "params": case.params},
        "batch": {**BASE_BATCH, **case.batch},
        "training": {"lr": 1e-3, "device": "cpu", **case.training},
        "variants": [{"id": "ref", "reference": True}],
        "pilot": {**BASE_PILOT, **case.pilot},
    }
    (camp / "campaign.toml").write_text(tomli_w.dumps(doc), "utf-8")
    return camp
