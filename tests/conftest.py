"""Fixtures shared by the whole suite.

``campaign`` is a writable campaign folder holding a frozen copy of the demo
notebook as it was first written (three learning rates, 200 updates, no runs),
so tests never depend on runs that a pilot appended to a user's ``campaigns/demo``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cockpit" / "templates" / "demo.toml"

CAMPAIGN_TEXT = """\
# Cockpit campaign notebook. Cockpit rewrites this file when it saves: comments are not
# kept; write free text in the notes fields instead.

[campaign]
name = "demo"
question = "Which learning rate trains the tiny instruction-following LM best within 200 updates: the reference 1e-4, half of it or twice it?"
held_constant = "updates"
quality_metric = "val_loss"
quality_target = 2.0
higher_is_better = false
notes = "Same architecture, data, seed set and effective batch (16 examples per update) for every variant; only the learning rate differs."

[task]
entry = "cockpit.tasks.tinylm:task"
extensions = []

[task.params]
d_model = 64
n_layers = 2
n_heads = 4
max_length = 48
train_examples = 3200
val_examples = 96
test_examples = 96

[batch]
microbatch = 2
accumulation = 8
data_replicas = 1
updates = 200
drop_last = true
eval_microbatch = 16

[training]
lr = 1e-4
optimizer = "adamw"
weight_decay = 0.01
schedule = "constant"
warmup_updates = 0
grad_clip = 1.0
precision = "fp32"
device = "auto"

[[variants]]
id = "lr1e-4"
reference = true
differs = "reference"
why = "the learning rate the recipe we start from uses"

[[variants]]
id = "lr5e-5"
set = { lr = 5e-5 }
differs = "learning rate halved"
why = "is the reference too aggressive for 200 updates?"

[[variants]]
id = "lr2e-4"
set = { lr = 2e-4 }
differs = "learning rate doubled"
why = "does a short budget reward a larger step?"

[stop]
nonfinite = true
divergence_factor = 4.0
patience = 3
wall_clock_minutes = 30.0
notes = "Fixed before any run: non-finite loss or gradient, loss above 4x its start, 3 validations without improvement, 30 minutes."

[validation]
every_updates = 50

[pilot]
updates_after_resume = 2
overfit_examples = 16
overfit_steps = 60
"""


@pytest.fixture(autouse=True)
def _no_inherited_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands wrap prose at ``COLUMNS`` when it is set (cockpit.termout); pytest-xdist's workers inherit
    ``COLUMNS=80`` from the runner, so a test that reads whole lines passed alone and failed in the suite. Every
    test starts without it; a test that wants a width sets it (monkeypatch.setenv, or a subprocess's env)."""
    monkeypatch.delenv("COLUMNS", raising=False)


_WORKER_THREADS: list[int] = []


@pytest.fixture(autouse=True)
def _one_share_of_the_cpus() -> None:
    """Phases run in the test's own process (``Context.in_memory``) compute with torch's default threads, one per
    CPU, in each of pytest-xdist's workers: on 2 CPUs, two workers (and a second suite beside them) make 4-8
    spinning intra-op threads, and a 26 s CLIP calibration test ran past its 300 s timeout under that load. Each
    worker computes on its share of the CPUs, as the pilot itself does on a busy box (cockpit/pilot/threads.py);
    pilots started as processes choose their own threads. Set once per worker, after torch is imported by a test
    module; a test that changes the threads restores them."""
    if _WORKER_THREADS or "torch" not in sys.modules:
        return
    import torch

    from cockpit.machine import available_cpus

    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    _WORKER_THREADS.append(max(1, int(available_cpus() // workers)))
    torch.set_num_threads(_WORKER_THREADS[0])


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def demo_text() -> str:
    return CAMPAIGN_TEXT


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    """A writable campaign folder (``.../campaigns/demo``) with the frozen demo notebook."""
    folder = tmp_path / "campaigns" / "demo"
    folder.mkdir(parents=True)
    (folder / "campaign.toml").write_text(CAMPAIGN_TEXT, "utf-8")
    return folder


# --------------------------------------------------------------------------- the tiers are folders

TIERS = Path(__file__).resolve().parent
QUICK = ("unit", "gates")  # never a slow test here: `pytest tests/unit` is the fast loop


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test in the wrong tier stops the run before it starts: every test of tests/integration is marked slow (so
    ``-m "not slow"`` keeps meaning the quick tiers), and none of tests/unit or tests/gates is."""
    wrong = []
    for item in items:
        parts = item.path.resolve().relative_to(TIERS).parts if item.path.resolve().is_relative_to(TIERS) else ()
        slow = item.get_closest_marker("slow") is not None
        if parts[:1] == ("integration",) and not slow:
            wrong.append(f"{item.nodeid}: not marked slow, in tests/integration (mark it, or move it to a quick tier)")
        elif parts[:1] and parts[0] in QUICK and slow:
            wrong.append(f"{item.nodeid}: marked slow, in tests/{parts[0]} (move it to tests/integration)")
    if wrong:
        raise pytest.UsageError("tests in the wrong tier:\n" + "\n".join(wrong))
