"""Every phase of a probe has a row: passed, failed, skipped with its reason, or never reached with what the
probe saw last; the gate notes print that reason where they printed "no inputs"; the resume row labels the
resumed and the uninterrupted value and says which state the difference points at."""

from __future__ import annotations

import sys

import torch
from torch import nn

from cockpit import events as ev
from cockpit.gatetable import findings
from cockpit.probe import judge, resume
from cockpit.probe import phases as ph
from tests.gates.test_probe import model_and_opt, pair, probe, steps, watched  # noqa: F401 - probe: the fixture


def test_a_script_that_only_evaluates_has_a_row_for_every_phase_saying_what_was_seen(probe):  # noqa: F811
    inst, sink = probe(steps=3)
    model, _ = model_and_opt()
    model.eval()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(4, 8))
    inst.at_exit()
    gates = sink.gates
    assert set(ph.TRAINING) <= set(gates), list(gates)
    fw = gates["forward"]
    assert fw["verdict"] == "skipped" and fw["message"].startswith("never reached: no training forward")
    assert "the probe saw 2 forwards without grad or in eval mode; the last was Sequential" in fw["message"]
    out = judge.judge_gates(watched(exit=sink.msgs[-1], returncode=0, gates=gates), "eval.py")
    assert out.status == ev.Status.FAILED and "the probe saw 2 forwards without grad" in out.reason


def test_the_phases_after_an_exception_are_never_reached_rows(probe, monkeypatch):  # noqa: F811
    inst, sink = probe(steps=3)
    model, opt = model_and_opt()
    nn.CrossEntropyLoss()(model(torch.randn(4, 8)), torch.randint(0, 3, (4,))).backward()
    try:
        raise ValueError("bad batch")
    except ValueError as exc:
        monkeypatch.setattr(sys, "last_exc", exc, raising=False)
        inst.at_exit()
    gates = sink.gates
    assert set(ph.TRAINING) <= set(gates), list(gates)
    assert gates["update_first"]["verdict"] == "fail"  # open when it raised: the script's failure, named
    for p in ("update_second", "validation", "save"):
        assert gates[p]["verdict"] == "skipped" and "never reached: the script raised ValueError" in gates[p]["message"]
        assert "1 backward() calls" in gates[p]["message"]


def test_the_gate_notes_print_a_skips_reason_not_no_inputs():
    row = {"phase": "validation", "verdict": "skipped", "inputs": {}, "message": "no evaluation seen in 5 steps"}
    text = "\n".join(t.plain for t in findings([row]))
    assert "validation: no evaluation seen in 5 steps" in text and "no inputs" not in text


def test_a_resume_row_labels_the_resumed_and_the_uninterrupted_loss():
    first, second = pair(steps((5, 9e-4, 1.95), (6, 8e-4, 1.8)), ["/x/ck.pt"])
    g = resume.gate(first, second, 2, exact=True)
    c = next(c for c in g.checks if c["name"] == "next losses equal the uninterrupted run")
    assert "step 5 resumed 1.950000, uninterrupted 1.900000" in c["detail"]
    assert "with the step and learning rate restored" in c["detail"] and "data order" in c["detail"]


def test_an_update_under_no_grad_is_seen_by_the_version_counters(probe):  # noqa: F811
    _, sink = probe(steps=2, to_end=True)
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    for _ in range(3):
        model.zero_grad()
        nn.CrossEntropyLoss()(model(torch.randn(4, 8)), torch.randint(0, 3, (4,))).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    assert [s["step"] for s in sink.events(ev.STEP)] == [1, 2]  # the third is seen where the script goes on
    assert sink.gates["update_first"]["verdict"] == "pass" and sink.gates["update_second"]["verdict"] == "pass"
