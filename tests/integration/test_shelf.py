"""The gates, calibrated on real third-party code: every healthy family passes with no failure (and, outside the
phases still being recalibrated, no warning), every broken twin is caught at its gate, naming what it found.

The shelf (``tests/shelf``, listed in ``tests/shelf/campaigns.py``) holds families built from the packages' own
classes with tiny configs: a nanoGPT-style GPT, Hugging Face GPT-2, BERT, BERT MLM, Mixtral (router loss),
CLIP, T5, Whisper, Wav2Vec2 CTC, ViT, transformers' ResNet, a PEFT LoRA adapter, a frozen-teacher distillation,
diffusers' UNet with a DDPM scheduler, an LSTM LM and an MLP regression, each with a broken twin where one
exists. Every case is a real detached pilot started as ``cockpit pilot`` starts it; they run a few at a time in
one module-scoped fixture. ``python -m tests.shelf.table`` prints the same results as a table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit import runs
from tests.shelf.campaigns import CASES
from tests.shelf.run import log_tail, run_cases
from tests.shelf.table import RECALIBRATING, Row, render, row_of

PARALLEL = 3
DEADLINE_S = 2400

pytestmark = [pytest.mark.slow, pytest.mark.timeout(DEADLINE_S + 60)]
HEALTHY = [n for n, c in CASES.items() if not c.gate]
TWINS = [n for n, c in CASES.items() if c.gate]


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, runs.RunState]:
    root = tmp_path_factory.mktemp("shelf")
    states = run_cases(root, list(CASES), parallel=PARALLEL, deadline_s=DEADLINE_S)
    # The table `python -m tests.shelf.table` prints, kept beside the runs: a suite run shows the whole shelf's
    # verdicts and messages without piloting it a second time.
    (root / "shelf-table.txt").write_text(render({n: row_of(n, st) for n, st in states.items()}), "utf-8")
    return states


def _row(shelf: dict[str, runs.RunState], name: str) -> Row:
    return row_of(name, shelf[name])


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_family_passes_with_no_failure(shelf: dict[str, runs.RunState], name: str) -> None:
    st, row = shelf[name], _row(shelf, name)
    assert st.status == "passed", f"{st.stop_reason}\n{log_tail(st)}"
    assert not row.fails, [(f.phase, f.check, f.detail) for f in row.fails]
    verdicts = {g["phase"]: g["verdict"] for g in st.gates}
    assert set(verdicts.values()) <= {"pass", "warn", "skipped", "n/a"}, verdicts


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_family_has_no_warning_outside_the_phases_being_recalibrated(
    shelf: dict[str, runs.RunState], name: str
) -> None:
    warns = [(f.phase, f.check, f.detail) for f in _row(shelf, name).warns if f.phase not in RECALIBRATING]
    assert not warns, warns


@pytest.mark.parametrize("name", TWINS)
def test_broken_twin_is_caught_at_its_gate_naming_the_cause(shelf: dict[str, runs.RunState], name: str) -> None:
    case, st, row = CASES[name], shelf[name], _row(shelf, name)
    gate = next((g for g in st.gates if g["phase"] == case.gate), None)
    assert gate is not None, (st.status, st.stop_reason, [g["phase"] for g in st.gates])
    assert row.caught, (row.expected, [(f.phase, f.check, f.detail) for f in row.findings])
    assert st.status == case.expect, f"{st.status}: {st.stop_reason}\n{log_tail(st)}"


def test_every_healthy_model_pilots_the_users_own_optimizer_and_loss(shelf: dict[str, runs.RunState]) -> None:
    forward = {n: next(g for g in shelf[n].gates if g["phase"] == "forward") for n in HEALTHY}
    assert "the task's optimizer (AdamW, 2 groups)" in forward["nanogpt"]["inputs"]["optimizer"]
    assert forward["nanogpt"]["inputs"]["loss"] == "(logits, loss)"
    assert forward["bert"]["inputs"]["loss"] == "model output .loss"
    assert forward["gpt2"]["inputs"]["loss"] == "sum/count"
    bert = forward["bert"]["inputs"]
    assert 0 < bert["trainable"] < bert["parameters"] / 2  # the frozen encoder stays frozen
    lora = forward["lora"]["inputs"]
    assert 0 < lora["trainable"] < lora["parameters"] / 10  # only the adapter trains


def test_the_shelf_has_fifteen_families_from_third_party_code() -> None:
    assert len(HEALTHY) >= 15, HEALTHY
    entries = {CASES[n].entry.split(":")[0] for n in HEALTHY}
    assert all((Path(__file__).parents[1] / "shelf" / e).is_file() for e in entries)
