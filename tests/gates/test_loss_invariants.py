"""The loss invariants (issue 35, classes 1-3), each on a tiny in-memory task: the initial loss against what its
objective implies, a loss bounded below and above the floor of a double softmax once the overfit runs on, and
each named loss term on its own."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot import outputs
from cockpit.pilot.phases import lossinit, lossterms, objective, overfitfloor
from tests.gates.test_phases import VOCAB, check, classifier, lm, through

INIT = lossinit.NAME


class Scaled(nn.Module):
    """The test classifier's MLP with its logits multiplied (a scale left in the head)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.net(x)


def forward_check(task: Any, name: str = INIT) -> tuple[dict[str, Any], Any]:
    g = through(task, "forward")["forward"]
    return check(g, name), g


# --------------------------------------------------------------------------- 1. the loss at initialisation


def test_a_mean_cross_entropy_is_recognised_and_near_ln_c() -> None:
    c, g = forward_check(classifier())
    assert c["ok"] and not c.get("na"), c
    assert "the loss is the mean cross-entropy of the logits" in c["detail"] and "ln 3 = 1.099" in c["detail"]
    fig = g.extra["initial_loss"]
    assert fig["what"] == "ln C" and abs(fig["excess"]) < 0.5 and fig["classes"] == 3


def test_a_sum_over_the_batch_is_named_with_its_factor_and_the_excess_in_nats() -> None:
    c, g = forward_check(classifier(loss=lambda m, b: F.cross_entropy(m(b["x"]), b["labels"], reduction="sum")))
    assert c.get("warn") and not c["ok"], c
    assert "a sum where a mean was meant" in c["detail"] and "4 x the mean cross-entropy" in c["detail"], c
    fig = g.extra["initial_loss"]
    assert f"{fig['excess']:+.3f} nats" in c["detail"] and fig["ratio"] > 2


def test_the_same_sum_over_tokens_of_a_language_model_counts_the_targets() -> None:
    def summed(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
        logits = m(b["input_ids"]).reshape(-1, VOCAB)
        return F.cross_entropy(logits, b["labels"].reshape(-1), ignore_index=-100, reduction="sum")

    c, g = forward_check(lm(loss=summed))
    n = g.extra["initial_loss"]["ratio"]
    assert c.get("warn") and "the targets that count in the microbatch" in c["detail"] and n > 2, c


def test_logits_multiplied_in_the_head_are_a_wrong_scale() -> None:
    c, _ = forward_check(classifier(build_model=lambda p: Scaled(100.0)))
    assert c.get("warn") and "logits at a wrong scale" in c["detail"] and "near ln 3" in c["detail"], c


def test_a_scale_inside_the_loss_is_told_from_an_extra_term_by_the_gradient_on_the_logits() -> None:
    scaled, _ = forward_check(classifier(loss=lambda m, b: F.cross_entropy(100 * m(b["x"]), b["labels"])))
    assert scaled.get("warn") and "logits scaled inside the loss" in scaled["detail"], scaled
    assert "cross-entropy of 100 x the model's logits" in scaled["detail"], scaled

    def penalised(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:  # a term that does not read the logits
        weights = sum((p**2).sum() for p in m.parameters())
        assert isinstance(weights, torch.Tensor)
        return F.cross_entropy(m(b["x"]), b["labels"]) + 5.0 * weights

    extra, _ = forward_check(classifier(loss=penalised))
    assert extra.get("warn") and "an extra term" in extra["detail"], extra
    assert "scaled inside" not in extra["detail"], extra


def test_a_double_softmax_is_named_at_init_where_the_logits_are_far_enough_from_uniform_to_tell() -> None:
    def twice(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
        probs = F.softmax(m(b["input_ids"]), -1).reshape(-1, VOCAB)
        return F.cross_entropy(probs, b["labels"].reshape(-1), ignore_index=-100)

    c, _ = forward_check(lm(loss=twice))
    assert c.get("warn") and not c["ok"] and "a double softmax" in c["detail"], c
    assert "ln(e + 12 - 1) - 1" in c["detail"], c
    assert lossinit.AT_INIT == lossterms.AT_INIT


def test_a_learned_start_below_uniform_stays_no_defect() -> None:
    class Knows(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
            return 5 * F.one_hot(y, 3).float() + 0 * self.lin(x)

    c, _ = forward_check(classifier(build_model=lambda p: Knows()))
    assert c["ok"] and "learned weights" in c["detail"], c


def test_a_squared_error_is_measured_against_the_targets_variance() -> None:
    from tests.verdict_tasks.regression import task

    c, g = forward_check(task)
    assert c["ok"] and "the targets' variance" in c["detail"] and "mean squared error" in c["detail"], c
    assert g.extra["initial_loss"]["what"] == "the targets' variance"


def test_an_objective_with_no_recognised_form_and_no_classes_is_not_applicable() -> None:
    from tests.verdict_tasks.contrastive import task

    c, _ = forward_check(task)
    assert c.get("na") and "no form Cockpit recognises" in c["detail"], c


def test_the_double_softmax_floor() -> None:
    # softmax of a one-hot probability vector puts e / (e + C - 1) on the target: the best such a loss can do
    for c in (2, 10, 65):
        p = torch.zeros(1, c)
        p[0, 0] = 1.0
        best = float(F.cross_entropy(p, torch.tensor([0])))
        assert abs(best - objective.double_softmax_floor(c)) < 1e-5


# --------------------------------------------------------------------------- 2. bounded below, and its floor


def test_a_healthy_fit_runs_on_and_settles_above_no_floor_of_a_double_softmax() -> None:
    g = through(classifier(), "overfit", {"accumulation": 1, "lr": 1e-2})["overfit"]
    fit = g.extra["overfit"]
    assert g.verdict.value == "pass", g.checks
    assert fit["passed_at"] is not None and fit["steps"] > fit["passed_at"]  # it ran on past the pass
    assert fit["steps"] - fit["passed_at"] <= overfitfloor.RUNON_MAX
    assert check(g, overfitfloor.BOUNDED)["ok"] and check(g, overfitfloor.FLOOR)["ok"]


def test_a_double_softmax_in_the_loss_is_measured_where_the_loss_settles() -> None:
    task = classifier(loss=lambda m, b: F.cross_entropy(F.softmax(m(b["x"]), -1), b["labels"]))
    gates = through(task, "overfit", {"accumulation": 1, "lr": 1e-2})
    assert check(gates["forward"], "outputs are logits")["ok"]  # the model's own output is logits
    c = check(gates["overfit"], overfitfloor.FLOOR)
    assert not c["ok"] and not c.get("warn"), c
    assert "double softmax" in c["detail"] and "ln(e + 3 - 1) - 1 = 0.5514" in c["detail"], c


def test_a_kl_with_the_wrong_sign_is_unbounded_below() -> None:
    from tests.blind.vae_kl_flipped import task

    g = through(task, "overfit", {"accumulation": 1, "lr": 1e-3})["overfit"]
    c = check(g, overfitfloor.BOUNDED)
    assert g.verdict.value == "fail" and not c["ok"] and not c.get("warn"), g.checks
    assert "unbounded below" in c["detail"] and "wrong sign" in c["detail"], c
    assert check(g, "loss falls below threshold")["ok"]  # the fit itself looked fine: only the run-on shows it


def test_the_run_on_reads_a_curve() -> None:
    steady = [10 - 0.01 * i for i in range(60)]
    runaway = [10 - 0.001 * i**2.5 for i in range(60)]
    assert not overfitfloor.accelerating(steady) and overfitfloor.accelerating(runaway)
    assert overfitfloor.runaway(runaway, 10) and not overfitfloor.runaway(steady, 10)
    flat = [1 + 0.5 * 0.8**i for i in range(60)]
    assert overfitfloor.settled(flat, flat[0]) and not overfitfloor.settled(runaway, 10)
    assert overfitfloor.runon_steps(20) == 40 and overfitfloor.runon_steps(1000) == overfitfloor.RUNON_MAX


# --------------------------------------------------------------------------- 3. each loss term on its own


def _terms(detach: bool, weight: float) -> Any:
    def loss(m: nn.Module, b: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        ce = F.cross_entropy(m(b["x"]), b["labels"])
        weights = sum(((p.detach() if detach else p) ** 2).sum() for p in m.parameters())
        assert isinstance(weights, torch.Tensor)
        return ce + weight * weights, {"ce": ce, "weights": weight * weights}

    return loss


def test_terms_are_read_from_a_dict_a_tuple_and_a_model_output() -> None:
    t = torch.tensor(1.0)
    lo = outputs.read_loss({"loss": t, "kl": torch.tensor(0.5), "n": 3}, torch.device("cpu"))
    assert set(lo.terms) == {"kl"}
    lo = outputs.read_loss((t, {"recon": torch.tensor(0.7)}), torch.device("cpu"))
    assert lo.form == "(loss, terms)" and set(lo.terms) == {"recon"}
    assert outputs.read_loss((t, 4), torch.device("cpu")).form == "sum/count"  # (sum, count) unchanged


def _margin(m: nn.Module, b: dict[str, Any]) -> dict[str, torch.Tensor]:
    logits = m(b["x"])
    ce, margin = F.cross_entropy(logits, b["labels"]), 0.5 * F.multi_margin_loss(logits, b["labels"])
    return {"loss": ce + margin, "ce": ce, "margin": margin}


def test_terms_that_add_up_are_each_reported_at_init_and_after_the_fit() -> None:
    gates = through(classifier(loss=_margin), "overfit", {"accumulation": 1, "lr": 1e-2})
    c = check(gates["forward"], lossterms.AT_INIT)
    assert c["ok"] and "the terms add up to the loss" in c["detail"] and "margin" in c["detail"], c
    f = check(gates["overfit"], lossterms.FALL)
    assert f["ok"] and "ce " in f["detail"] and "->" in f["detail"], f
    assert set(gates["overfit"].extra["loss_terms"]["terms"]) == {"ce", "margin"}


def test_a_detached_term_is_named_at_init_and_as_not_falling_after_the_fit() -> None:
    gates = through(classifier(loss=_terms(True, 0.1)), "overfit", {"accumulation": 1, "lr": 1e-2})
    c = check(gates["forward"], lossterms.AT_INIT)
    assert c.get("warn") and "weights does not require grad" in c["detail"], c
    f = check(gates["overfit"], lossterms.FALL)
    assert f.get("warn") and "weights did not fall" in f["detail"], f


def test_an_auxiliary_term_measured_beside_the_objective_that_dominates_is_named() -> None:
    parts = lossterms.parts_of(204.0, {"aux_loss": 2.0}, 4.0)
    assert parts.parts == {"aux_loss": 200.0} and "a weight of 100" in parts.how
    share = lossterms.aux_share(204.0, parts)
    assert share is not None and share[0] > 0.9 and share[1] == ["aux_loss"]
    small = lossterms.parts_of(4.04, {"aux_loss": 2.0}, 4.0)
    assert (lossterms.aux_share(4.04, small) or (1.0, []))[0] < 0.05


def test_no_terms_is_not_applicable() -> None:
    c, _ = forward_check(classifier(), lossterms.AT_INIT)
    assert c.get("na") and "no named terms" in c["detail"], c


def _nan_term(m: nn.Module, b: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    out = m(b["x"])
    return F.cross_entropy(out, b["labels"]), {"aux": out.mean() * float("nan")}  # logged, left out of the total


def _inf_term(m: nn.Module, b: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ce = F.cross_entropy(m(b["x"]), b["labels"])
    return ce, {"perplexity": torch.exp(ce * 1000)}  # past float32's range


def test_a_nan_term_beside_a_finite_loss_fails_naming_the_loss() -> None:
    """A term the loss returns as NaN while the total is finite is left out of the total: the run trains on and
    every logged value of it is NaN (the fuzz's terms_nan passed every gate)."""
    c, _ = forward_check(classifier(loss=_nan_term), lossterms.AT_INIT)
    assert not c["ok"] and not c.get("warn") and "aux is NaN at init" in c["detail"], c
    assert "test_loss_invariants.py:" in c["detail"] and "(_nan_term)" in c["detail"], c
    c, _ = forward_check(classifier(loss=_inf_term), lossterms.AT_INIT)
    assert c.get("warn") and "perplexity is infinite at init" in c["detail"], c
