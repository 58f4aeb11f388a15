"""The update gates' invariants of the user's optimizer and scheduler (issue 35, classes 10 and 11), in-process on
the tiny tasks of :mod:`tests.gates.test_phases`: each check fails (or warns) on the user's mistake it names, passes
on the healthy form, and says not applicable where its precondition does not hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.context import Context
from cockpit.pilot.gate import Gate
from cockpit.pilot.phases.augmentation import epochs_differ
from cockpit.pilot.rng import rng_state
from cockpit.pilot.trainer import Trainer
from tests.gates.test_phases import PARAMS, check, classifier, through

BASE_COLLATE = classifier().collate


def _verdict(c: dict[str, Any]) -> str:
    return "na" if c.get("na") else "pass" if c["ok"] else "warn" if c.get("warn") else "fail"


# --------------------------------------------------------------------------- the schedule


def _linear(optimizer: torch.optim.Optimizer, horizon: int) -> Any:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: max(0.0, 1 - t / horizon))


def test_a_scheduler_also_stepped_in_the_loss_is_named_per_microbatch() -> None:
    built: list[Any] = []

    def scheduler(opt: Any, p: dict[str, Any]) -> Any:
        built[:] = [_linear(opt, 20)]
        return built[0]

    def loss(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
        if m.training:
            built[0].step()  # once per microbatch, besides Cockpit's step per update
        return F.cross_entropy(m(b["x"]), b["labels"])

    g = through(classifier(scheduler=scheduler, loss=loss), "update_second")["update_second"]
    c = check(g, "schedule steps once per update")
    assert _verdict(c) == "fail" and "advanced 15 times in 5 updates" in c["detail"], c
    assert "once per microbatch" in c["detail"] and "3x faster" in c["detail"]
    healthy = through(classifier(scheduler=lambda o, p: _linear(o, 20)), "update_second")["update_second"]
    c = check(healthy, "schedule steps once per update")
    assert _verdict(c) == "pass" and "advanced 5 times in 5 updates" in c["detail"], c


def test_a_scheduler_over_another_optimizer_is_named() -> None:
    def scheduler(opt: Any, p: dict[str, Any]) -> Any:
        other = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=p["lr"])
        return _linear(other, 20)

    g = through(classifier(scheduler=scheduler), "update_second")["update_second"]
    c = check(g, "schedule steps once per update")
    assert _verdict(c) == "fail" and "drives another optimizer" in c["detail"], c


def test_a_schedule_reaching_zero_halfway_fails_and_one_spanning_the_run_passes() -> None:
    half = through(classifier(scheduler=lambda o, p: _linear(o, 10)), "update_second")["update_second"]
    c = check(half, "schedule spans the run")
    assert _verdict(c) == "fail", c
    assert "to 0 at update 10 of the run's 20" in c["detail"] and "the accumulation of 2" in c["detail"]
    assert half.extra["schedule"]["zero_from"] == 10
    long = through(classifier(scheduler=lambda o, p: _linear(o, 40)), "update_second")["update_second"]
    c = check(long, "schedule spans the run")
    assert _verdict(c) == "warn" and "reaches 0 only at update 40" in c["detail"], c
    full = through(classifier(scheduler=lambda o, p: _linear(o, 20)), "update_second")["update_second"]
    assert _verdict(check(full, "schedule spans the run")) == "pass"
    own = through(classifier(), "update_second")["update_second"]
    assert _verdict(check(own, "schedule spans the run")) == "na"
    cyclic = lambda o, p: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5)  # noqa: E731
    c = check(through(classifier(scheduler=cyclic), "update_second")["update_second"], "schedule spans the run")
    assert _verdict(c) == "pass", c  # it touches 0 every 10 updates and rises again: no horizon to judge


def test_a_stepped_schedule_is_replayed_apart_from_the_run() -> None:
    """A scheduler other than LambdaLR is deep-copied over a stand-in optimizer: the run's own is untouched."""
    g = through(
        classifier(scheduler=lambda o, p: torch.optim.lr_scheduler.StepLR(o, step_size=5, gamma=0.0)), "update_second"
    )["update_second"]
    c = check(g, "schedule spans the run")
    assert _verdict(c) == "fail" and "to 0 at update 5 of the run's 20" in c["detail"], c
    assert _verdict(check(g, "schedule steps once per update")) == "pass"


def test_a_warm_up_from_zero_is_no_failure_of_the_first_update() -> None:
    warm = lambda o, p: torch.optim.lr_scheduler.LambdaLR(o, lambda t: min(1.0, t / 3))  # noqa: E731
    gates = through(classifier(scheduler=warm), "update_second")
    c = check(gates["update_first"], "targeted parameters changed")
    assert c["ok"] and "learning rate was 0" in c["detail"], c
    assert _verdict(check(gates["update_second"], "every stepped parameter changed")) == "pass"


def test_a_group_at_learning_rate_zero_is_named_at_a_later_update() -> None:
    def optimizer(m: nn.Module, p: dict[str, Any]) -> Any:
        return torch.optim.SGD([{"params": m[0].parameters(), "lr": 0.0}, {"params": m[2].parameters()}], lr=p["lr"])

    g = through(classifier(optimizer=optimizer), "update_second")["update_second"]
    c = check(g, "every stepped parameter changed")
    assert _verdict(c) == "fail" and "group's rate is 0" in c["detail"] and "0.weight" in c["detail"], c


# --------------------------------------------------------------------------- weight decay


def _normed(p: dict[str, Any]) -> nn.Module:
    return nn.Sequential(nn.Linear(6, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 3))


def test_weight_decay_on_norms_and_biases_warns_and_split_groups_pass() -> None:
    everywhere = classifier(
        build_model=_normed, optimizer=lambda m, p: torch.optim.AdamW(m.parameters(), lr=p["lr"], weight_decay=0.1)
    )
    g = through(everywhere, "update_first", params={"weight_decay": 0.1})["update_first"]
    c = check(g, "weight decay spares biases and norms")
    assert _verdict(c) == "warn" and "2 normalisation weights, 2 biases" in c["detail"], c
    assert _verdict(check(g, "weight decay as configured")) == "pass"
    plain = classifier(optimizer=lambda m, p: torch.optim.AdamW(m.parameters(), lr=p["lr"]))  # decay 0.01, no norm
    c = check(through(plain, "update_first")["update_first"], "weight decay spares biases and norms")
    assert _verdict(c) == "pass" and "biases alone" in c["detail"], c

    def split(m: nn.Module, p: dict[str, Any]) -> Any:
        decay = [q for q in m.parameters() if q.dim() >= 2]
        rest = [q for q in m.parameters() if q.dim() < 2]
        groups = [{"params": decay, "weight_decay": p["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=p["lr"])

    g = through(classifier(build_model=_normed, optimizer=split), "update_first", params={"weight_decay": 0.1})
    assert _verdict(check(g["update_first"], "weight decay spares biases and norms")) == "pass"
    assert _verdict(check(g["update_first"], "weight decay as configured")) == "pass"


def test_a_configured_weight_decay_the_task_optimizer_ignores_warns() -> None:
    none = classifier(optimizer=lambda m, p: torch.optim.SGD(m.parameters(), lr=p["lr"]))
    g = through(none, "update_first", params={"weight_decay": 0.1})["update_first"]
    c = check(g, "weight decay as configured")
    assert _verdict(c) == "warn" and "has no effect" in c["detail"] and "weight_decay 0" in c["detail"], c
    assert _verdict(check(g, "weight decay spares biases and norms")) == "na"
    own = through(classifier(build_model=_normed), "update_first", params={"weight_decay": 0.1})["update_first"]
    c = check(own, "weight decay spares biases and norms")
    assert _verdict(c) == "pass" and "Cockpit's optimizer" in c["detail"], c  # the setting's documented meaning


# --------------------------------------------------------------------------- clipping, tensors beside the model


def test_clipping_misses_a_tensor_beside_the_model_and_acts_on_the_model() -> None:
    temperature = nn.Parameter(torch.ones(()))

    def loss(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
        return F.cross_entropy(m(b["x"]) / temperature, b["labels"])

    def optimizer(m: nn.Module, p: dict[str, Any]) -> Any:
        return torch.optim.SGD([*m.parameters(), temperature], lr=p["lr"])

    gates = through(classifier(loss=loss, optimizer=optimizer), "update_second", params={"grad_clip": 0.01})
    c = check(gates["update_first"], "optimizer holds only the model's parameters")
    assert _verdict(c) == "warn" and "1 tensor that is not a parameter of the model" in c["detail"], c
    c = check(gates["update_second"], "gradient clipping acts")
    assert _verdict(c) == "fail" and "grad_clip = 0.01" in c["detail"] and "not a parameter" in c["detail"], c
    healthy = through(classifier(), "update_second", params={"grad_clip": 0.01})["update_second"]
    c = check(healthy, "gradient clipping acts")
    assert _verdict(c) == "pass" and "-> 0.01" in c["detail"], c
    assert healthy.extra["grad_clip"]["bound"] == 0.01
    loose = through(classifier(), "update_second", params={"grad_clip": 1e6})["update_second"]
    assert _verdict(check(loose, "gradient clipping acts")) == "na"
    assert _verdict(check(through(classifier(), "update_second")["update_second"], "gradient clipping acts")) == "na"


def test_the_fp16_scaler_is_read_where_configured() -> None:
    g = through(classifier(), "update_second", params={"precision": "fp16"})["update_second"]
    c = check(g, "grad scaler takes steps")
    assert _verdict(c) == "pass" and "scale 65536" in c["detail"], c
    fp32 = through(classifier(), "update_second")["update_second"]
    assert _verdict(check(fp32, "grad scaler takes steps")) == "na"


# --------------------------------------------------------------------------- data randomness across epochs


def test_a_collate_that_reseeds_a_global_generator_is_named_and_a_seeded_draw_passes() -> None:
    def reseeding(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        batch = BASE_COLLATE(examples, params)
        np.random.seed(0)  # "reproducible" augmentation: the same noise every epoch
        batch["x"] = batch["x"] + torch.from_numpy(np.random.normal(0, 0.01, batch["x"].shape)).float()
        return batch

    g = through(classifier(collate=reseeding), "update_second")["update_second"]
    c = check(g, "augmentations differ across epochs")
    assert _verdict(c) == "fail" and "re-seeds NumPy's" in c["detail"], c

    def drawing(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        batch = BASE_COLLATE(examples, params)
        batch["x"] = batch["x"] + 0.01 * torch.randn_like(batch["x"])
        return batch

    g = through(classifier(collate=drawing), "update_second")["update_second"]
    c = check(g, "augmentations differ across epochs")
    assert _verdict(c) == "pass" and "draws x" in c["detail"] and "own process" in c["detail"], c
    plain = through(classifier(), "update_second")["update_second"]
    assert _verdict(check(plain, "augmentations differ across epochs")) == "na"


def test_the_random_state_is_the_same_after_the_measurement() -> None:
    """The augmentation check collates under other random states and puts the run's back: the next loss is the one
    an unmeasured run gets."""
    ctx = Context.in_memory(classifier(), dict(PARAMS))
    ctx.trainer_ = Trainer(ctx.the_task, ctx.params, 0, torch.device("cpu"))
    ctx.trainer_.load_data()
    before = rng_state()
    epochs_differ(ctx, Gate("update_second"), ctx.trainer_.examples("train", [0, 1, 2, 3]))
    after = rng_state()
    assert torch.equal(before["torch"], after["torch"]) and before["python"] == after["python"]
    assert "numpy" in before and "numpy" in after
    assert torch.equal(before["numpy"]["keys"], after["numpy"]["keys"])


def test_layers_frozen_by_a_name_filter_with_the_optimizer_over_all_of_them_say_what_trains() -> None:
    """TrainCheck's pytorch-forum-84911 in miniature: every layer but BatchNorm frozen by a name filter (the head
    too), the optimizer handed every parameter. The warning says what trains, with its share."""

    def build(p: dict[str, Any]) -> nn.Module:
        model = nn.Sequential(nn.Linear(6, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 3))
        for name, q in model.named_parameters():
            q.requires_grad = name.startswith("1.")  # "train only the BatchNorm layers"
        return model

    task = classifier(build_model=build, optimizer=lambda m, p: torch.optim.SGD(m.parameters(), lr=p["lr"]))
    g = through(task, "update_first", params={"accumulation": 1, "microbatch": 8})["update_first"]
    c = check(g, "no frozen parameter in the optimizer")
    assert _verdict(c) == "warn", c
    assert "what trains is 2 of 6 tensors, 64 of" in c["detail"] and "all in BatchNorm1d layers" in c["detail"], c
