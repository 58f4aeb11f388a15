"""The gates, calibrated on real third-party code: every healthy model passes with no warning, every broken twin
fails (or warns) at its gate, naming what it found.

The shelf (``tests/shelf``) holds a nanoGPT-style GPT, Hugging Face GPT-2 and BERT, torchvision's ResNet-18 and
a broken twin of each. Every case is a real detached pilot started as ``cockpit pilot`` starts it; they run a few
at a time in one module-scoped fixture.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cockpit import launch, runs
from tests.shelf.campaigns import CASES, write

PARALLEL = 3
DEADLINE_S = 1200

pytestmark = [pytest.mark.slow, pytest.mark.timeout(DEADLINE_S + 60)]
ROOT = Path(__file__).resolve().parents[1]
HEALTHY = [n for n, c in CASES.items() if not c.gate]
TWINS = [n for n, c in CASES.items() if c.gate]


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, runs.RunState]:
    root = tmp_path_factory.mktemp("shelf")
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    waiting = list(CASES)
    running: dict[str, Path] = {}
    done: dict[str, runs.RunState] = {}
    deadline = time.monotonic() + DEADLINE_S
    while waiting or running:
        while waiting and len(running) < PARALLEL:
            name = waiting.pop(0)
            _, running[name] = launch.new_run(write(root, name), None, 0, env=env)
        for name, rdir in list(running.items()):
            if not runs.is_alive(rdir):
                launch.reap()
                done[name] = runs.state(rdir)
                del running[name]
        if time.monotonic() > deadline:
            for rdir in running.values():
                launch.stop(rdir, grace_s=5)
            pytest.fail(f"shelf pilots still running after {DEADLINE_S} s: {', '.join(running)}")
        time.sleep(0.2)
    return done


def _log(st: runs.RunState) -> str:
    return (st.dir / runs.LOG_FILE).read_text(errors="replace")[-3000:]


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_model_passes_every_gate_without_a_warning(shelf: dict[str, runs.RunState], name: str) -> None:
    st = shelf[name]
    assert st.status == "passed", f"{st.stop_reason}\n{_log(st)}"
    not_ok = [(g["phase"], c["name"], c["detail"]) for g in st.gates for c in g["checks"] if not c["ok"]]
    assert not not_ok, not_ok
    verdicts = {g["phase"]: g["verdict"] for g in st.gates}
    assert set(verdicts.values()) <= {"pass", "skipped"}, verdicts
    skipped = [p for p, v in verdicts.items() if v == "skipped"]
    assert skipped in ([], ["accumulation"]), skipped  # accumulation is not applicable at one microbatch


@pytest.mark.parametrize("name", TWINS)
def test_broken_twin_fails_at_its_gate_naming_the_cause(shelf: dict[str, runs.RunState], name: str) -> None:
    case = CASES[name]
    st = shelf[name]
    assert st.status == case.expect, f"{st.status}: {st.stop_reason}\n{_log(st)}"
    gate = next(g for g in st.gates if g["phase"] == case.gate)
    assert gate["verdict"] == case.verdict, gate["checks"]
    check = next(c for c in gate["checks"] if c["name"] == case.check)
    assert not check["ok"] and bool(check.get("warn")) == (case.verdict == "warn"), check
    for word in case.words:
        assert word in check["detail"], (word, check["detail"])


def test_every_healthy_model_pilots_the_users_own_optimizer_and_loss(shelf: dict[str, runs.RunState]) -> None:
    forward = {n: next(g for g in shelf[n].gates if g["phase"] == "forward") for n in HEALTHY}
    assert "the task's optimizer (AdamW, 2 groups)" in forward["nanogpt"]["inputs"]["optimizer"]
    assert forward["nanogpt"]["inputs"]["loss"] == "(logits, loss)"
    assert forward["bert"]["inputs"]["loss"] == "model output .loss"
    assert forward["gpt2"]["inputs"]["loss"] == "sum/count"
    bert = forward["bert"]["inputs"]
    assert 0 < bert["trainable"] < bert["parameters"] / 2  # the frozen encoder stays frozen
