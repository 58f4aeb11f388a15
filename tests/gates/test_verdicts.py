"""Verdicts that measure, on tiny tasks holding one kind of objective or one user mistake each (tests/verdict_tasks).

Each test runs the pilot's phases in this process (``Context.in_memory``) up to the phase that judges, or the
whole pilot as ``cockpit pilot`` runs it, and asserts the verdict and the words that name the cause.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cockpit import events as ev
from cockpit.pilot.context import Context
from cockpit.pilot.gate import Gate
from cockpit.pilot.phases import PHASES
from cockpit.pilot.pilot import run_phase
from cockpit.pilot.task import Task

ROOT = Path(__file__).resolve().parents[2]
TASKS = Path(__file__).resolve().parents[1] / "verdict_tasks"
PARAMS = {"microbatch": 4, "accumulation": 2, "lr": 1e-2, "device": "cpu", "updates": 20, "eval_microbatch": 8}


def phases(
    task: Task, last: str, params: dict[str, Any] | None = None, pilot: dict[str, Any] | None = None
) -> dict[str, Gate]:
    """The phases in order up to ``last`` (or the first that ends the pilot); their gates by name."""
    ctx = Context.in_memory(task, {**PARAMS, **(params or {})}, pilot=pilot)
    gates: dict[str, Gate] = {}
    for phase in PHASES:
        g, ended = run_phase(ctx, phase)
        gates[phase.name] = g
        stops = ended is not None or (g.verdict == ev.Verdict.FAIL and not phase.independent)
        if phase.name == last or stops:
            return gates
    raise AssertionError(f"no phase {last}")


def check(g: Gate, name: str) -> dict[str, Any]:
    return next(c for c in g.checks if c["name"] == name)


# --------------------------------------------------------------------------- 1. nothing trains


def test_a_reference_made_by_copy_copy_froze_the_policy_and_backward_says_so() -> None:
    from tests.verdict_tasks.frozen_policy import task

    gates = phases(task, "backward")
    assert gates["forward"].verdict.value == "pass", gates["forward"].checks
    g = gates["backward"]
    c = check(g, "something trains")
    assert g.verdict.value == "fail" and not c["ok"], g.checks
    for words in ("no parameter requires grad", "policy", "ref (shares its parameter tensors with policy", "copy.copy"):
        assert words in c["detail"], (words, c["detail"])


# --------------------------------------------------------------------------- 2. accumulation: the measured cause

ACC = "accumulated == single batch"


def test_clip_in_batch_negatives_are_an_expected_batch_level_term_with_its_size() -> None:
    from tests.verdict_tasks.clip_task import task

    g = phases(task, "accumulation", {"lr": 3e-4})["accumulation"]
    c = check(g, ACC)
    assert g.verdict.value == "pass" and c["ok"], g.checks
    assert "in-batch negatives" in c["detail"] and "difference" in c["detail"], c["detail"]
    assert g.extra["decomposition"]["gap"] > 0.01


def test_an_undeclared_batch_level_term_is_a_warning_and_a_declared_one_a_note() -> None:
    from tests.verdict_tasks import contrastive

    g = phases(contrastive.task, "accumulation")["accumulation"]
    c = check(g, ACC)
    assert g.verdict.value == "warn" and c.get("warn"), g.checks
    said = "the loss has a batch-level term: accumulating 2 microbatches of 4 optimises a different objective than one"
    assert said in c["detail"] and "one batch of 8" in c["detail"], c["detail"]
    assert "Task.batch_level_loss" in c["detail"]
    g = phases(contrastive.declared, "accumulation")["accumulation"]
    c = check(g, ACC)
    assert g.verdict.value == "pass" and "declared by Task.batch_level_loss" in c["detail"], g.checks


def test_a_difference_no_cause_explains_still_fails() -> None:
    from tests.verdict_tasks.grad_hook import task

    g = phases(task, "accumulation")["accumulation"]
    c = check(g, ACC)
    assert g.verdict.value == "fail" and not c.get("warn"), g.checks
    assert "not a batch-level term" in c["detail"] and "not uneven counts" in c["detail"], c["detail"]


def test_uneven_counts_still_fail_with_the_weighted_fix() -> None:
    import torch.nn.functional as F

    from tests.gates.test_phases import lm

    def mean(m: Any, b: dict[str, Any]) -> Any:  # a mean per microbatch over uneven token counts
        logits = m(b["input_ids"])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["labels"].reshape(-1), ignore_index=-100)

    g = phases(lm(loss=mean), "accumulation")["accumulation"]
    c = check(g, ACC)
    assert g.verdict.value == "fail" and "weighted by its count" in c["detail"] and "(sum, count)" in c["detail"]


# --------------------------------------------------------------------------- 3. overfit: the user's rate, measured


def test_overfit_runs_at_the_users_rate_and_a_notebook_rate_wins() -> None:
    from tests.verdict_tasks.smoothed import task

    g = phases(task, "overfit", {"accumulation": 1, "lr": 1e-3})["overfit"]
    assert g.inputs["lr"] == 1e-3 and g.inputs["lr_source"] == "the campaign's learning rate", g.inputs
    g = phases(task, "overfit", {"accumulation": 1, "lr": 1e-3}, {"overfit_lr": 5e-3})["overfit"]
    assert g.inputs["lr"] == 5e-3 and g.inputs["lr_source"] == "[pilot] overfit_lr", g.inputs


def test_a_fresh_model_that_does_not_fit_beside_the_piloted_one_is_not_applicable_not_an_oom(monkeypatch) -> None:
    """The overfit check trains a second model beside the piloted one: on a GPU that holds the campaign's one model,
    that second copy can run out of memory. That measures the check, not the long run: n/a with why, and the pilot
    goes on to validation (it used to end the pilot with status oom)."""
    import torch

    from cockpit.pilot.phases import overfit
    from tests.verdict_tasks.smoothed import task

    def no_room(*args: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(overfit, "_attempt", no_room)
    gates = phases(task, "validation", {"accumulation": 1, "lr": 1e-3})
    g = gates["overfit"]
    assert g.verdict == ev.Verdict.NA, g.checks
    assert all(c.get("na") for c in g.checks) and "did not fit beside the piloted one" in g.checks[0]["detail"]
    assert "validation" in gates and gates["validation"].verdict != ev.Verdict.FAIL


def test_a_label_smoothed_loss_with_a_floor_is_not_read_as_cannot_fit() -> None:
    from tests.verdict_tasks.smoothed import task

    g = phases(task, "overfit", {"accumulation": 1, "lr": 1e-3})["overfit"]
    assert g.verdict.value == "pass", g.checks
    c = check(g, "loss falls below threshold")
    assert "cannot fit" not in c["detail"] and g.extra["overfit"]["accuracy"] >= 0.9, c
    losses = g.extra["overfit"]["losses"]
    assert losses[-1] > 0.1 * losses[0]  # the old 0.1x ratio would have failed it


def test_a_negative_value_of_a_likelihood_loss_is_a_finding_not_a_pass() -> None:
    from tests.verdict_tasks.nll_on_scores import task

    g = phases(task, "overfit", {"accumulation": 1, "lr": 1e-3})["overfit"]
    c = check(g, "loss in range")
    assert g.verdict.value == "fail" and not c["ok"] and not c.get("warn"), g.checks
    assert "went negative" in c["detail"] and "cannot be below 0" in c["detail"], c["detail"]


# --------------------------------------------------------------------------- 4. stochastic objectives


def test_a_diffusion_loss_is_deterministic_given_the_rng_and_the_pilot_goes_on() -> None:
    from tests.verdict_tasks.ddpm import task

    gates = phases(task, "export")
    v = gates["validation"]
    c = check(v, "deterministic")
    assert v.verdict.value == "pass" and c.get("na"), v.checks
    assert "replaying the RNG state reproduces the loss exactly" in c["detail"], c["detail"]
    assert gates["resume"].verdict.value == "pass", gates["resume"].checks
    assert gates["export"].verdict.value == "pass", gates["export"].checks


def test_randomness_the_seed_does_not_control_is_a_finding() -> None:
    from tests.verdict_tasks.ddpm import own_generator

    v = phases(own_generator, "validation")["validation"]
    c = check(v, "deterministic")
    assert v.verdict.value == "fail" and not c["ok"], v.checks
    assert "replaying the RNG state" in c["detail"] and "does not reproduce" in c["detail"], c["detail"]


# --------------------------------------------------------------------------- 5. healthy families, whole pilot


def test_a_peft_adapter_loaded_for_inference_is_named_at_backward() -> None:
    from tests.verdict_tasks.peft_inference import task

    g = phases(task, "backward")["backward"]
    c = check(g, "something trains")
    assert g.verdict.value == "fail" and "no parameter requires grad" in c["detail"], g.checks
    assert "is_trainable=False" in c["detail"], c["detail"]


def test_a_training_run_with_nothing_to_train_is_the_tasks_error_in_words() -> None:
    import torch

    from cockpit.pilot.trainer import Trainer, UserCodeError
    from tests.verdict_tasks.frozen_policy import task

    tr = Trainer(task, PARAMS, 0, torch.device("cpu"))
    with pytest.raises(UserCodeError) as info:
        tr.build()
    assert info.value.where == "build_model" and "shares its parameter tensors with policy" in str(info.value)


def test_batchnorm_declared_by_batch_statistics_is_an_expected_note() -> None:
    from torch import nn

    from tests.gates.test_phases import classifier

    def bn(p: dict[str, Any]) -> nn.Module:
        return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))

    g = phases(classifier(build_model=bn, batch_statistics=True), "accumulation")["accumulation"]
    c = check(g, ACC)
    assert (
        g.verdict.value == "pass" and "BatchNorm" in c["detail"] and "as Task.batch_statistics declares" in c["detail"]
    ), g.checks


def test_a_slow_rate_still_learning_when_the_steps_run_out_is_a_warning_not_a_failure() -> None:
    from tests.gates.test_phases import lm

    g = phases(lm(), "overfit", {"lr": 3e-4}, {"overfit_steps": 5})["overfit"]
    c = check(g, "targets recovered")
    assert g.verdict.value == "warn" and c.get("warn") and "still learning" in c["detail"], g.checks


def test_a_regression_with_real_valued_targets_fits_without_class_predictions() -> None:
    from tests.verdict_tasks.regression import task

    g = phases(task, "overfit")["overfit"]
    assert g.verdict.value == "pass", g.checks
    assert check(g, "output depends on the input")["ok"] and g.extra["overfit"]["accuracy"] is None


def test_state_carried_between_calls_is_named_as_state_not_randomness() -> None:
    from tests.verdict_tasks.carried_state import task

    ctx = Context.in_memory(task, PARAMS)
    gates = {}
    for phase in PHASES:  # on past the forward gate (its causal-mask probe also sees the carried state)
        gates[phase.name], _ = run_phase(ctx, phase)
        if phase.name == "validation":
            break
    for phase, name in (("accumulation", ACC), ("validation", "deterministic")):
        c = check(gates[phase], name)
        assert gates[phase].verdict.value == "warn" and c.get("warn"), (phase, gates[phase].checks)
        assert "carries state from one call to the next" in c["detail"] and "CarriedLSTM.hidden" in c["detail"]
        assert "randomness the" not in c["detail"], c["detail"]


def test_a_first_adam_step_that_moves_as_many_elements_up_as_down_is_seen() -> None:
    import torch

    from cockpit.pilot.phases.steps import param_fingerprint

    model = torch.nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, 0.6, 0.7, 0.8]]))
    before = param_fingerprint(model)
    with torch.no_grad():
        model.weight += torch.tensor([[1e-3, -1e-3, 1e-3, -1e-3]])  # what Adam's first step does: +-lr each
    assert param_fingerprint(model)["weight"] != before["weight"]


def test_targets_recovered_is_not_applicable_without_class_predictions_never_a_pass() -> None:
    """A regression's float targets have no classes to predict: the check used to pass ("judged on the loss
    alone"); unknown is never a pass, so it is n/a and the loss check decides."""
    from tests.verdict_tasks.regression import task

    g = phases(task, "overfit", {"accumulation": 1})["overfit"]
    c = check(g, "targets recovered")
    assert c.get("na") and c["detail"].startswith("not applicable: no class predictions"), c
    assert check(g, "loss falls below threshold")["ok"] and g.verdict.value == "pass", g.checks
