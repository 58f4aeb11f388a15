"""Invariants of state, measured in the pilot (issue 35): frozen modules in eval mode (forward), state kept attached
across updates (update_second), float inputs in their range (data). Tiny in-memory tasks, one phase run after another
in this process."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot import attached, frozenmode, inputrange
from cockpit.pilot.phases import ranges
from cockpit.pilot.task import Task
from tests.gates.test_phases import _cls_collate, _cls_data, check, classifier, through


class Distill(nn.Module):
    """A student and a frozen teacher (dropout 0.3, or none, or BatchNorm) whose logits are the student's target."""

    def __init__(self, teacher: nn.Module) -> None:
        super().__init__()
        self.student = nn.Linear(6, 3)
        self.teacher = teacher
        self.teacher.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.student(x)


def teacher(kind: str) -> nn.Module:
    inside: nn.Module = {"dropout": nn.Dropout(0.3), "none": nn.Identity(), "batchnorm": nn.BatchNorm1d(16)}[kind]
    return nn.Sequential(nn.Linear(6, 16), inside, nn.ReLU(), nn.Linear(16, 3)).eval()  # eval once: train() undoes it


def distill_loss(eval_teacher: bool) -> Any:
    def loss(m: Distill, b: dict[str, Any]) -> torch.Tensor:
        if eval_teacher:
            m.teacher.eval()
        with torch.no_grad():
            t = m.teacher(b["x"])
        s = m(b["x"])
        kl = F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True, reduction="batchmean")
        return F.cross_entropy(s, b["labels"]) + kl

    return loss


def distill(kind: str, eval_teacher: bool = False) -> Task:
    return Task(
        build_model=lambda p: Distill(teacher(kind)),
        datasets=_cls_data,
        collate=_cls_collate,
        loss=distill_loss(eval_teacher),
        kind="classification",
        label_names=["neg", "mid", "pos"],
        input_key="x",
    )


class FrozenEncoder(nn.Module):
    """A frozen encoder (dropout or BatchNorm inside) under a trained head: its output is a feature."""

    def __init__(self, inside: nn.Module) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), inside, nn.ReLU())
        self.encoder.requires_grad_(False)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def frozen_encoder(inside: nn.Module) -> Task:
    return Task(
        build_model=lambda p: FrozenEncoder(inside),
        datasets=_cls_data,
        collate=_cls_collate,
        loss=lambda m, b: F.cross_entropy(m(b["x"]), b["labels"]),
        kind="classification",
        label_names=["neg", "mid", "pos"],
        input_key="x",
    )


def frozen_check(task: Task) -> dict[str, Any]:
    return check(through(task, "forward")["forward"], frozenmode.NAME)


def test_a_teacher_left_in_training_mode_with_dropout_fails_naming_it() -> None:
    c = frozen_check(distill("dropout"))
    assert not c["ok"] and not c.get("warn"), c
    assert "teacher" in c["detail"] and "random" in c["detail"] and "target" in c["detail"], c["detail"]
    assert ".eval()" in c["detail"]


def test_a_teacher_set_to_eval_in_the_loss_passes() -> None:
    c = frozen_check(distill("dropout", eval_teacher=True))
    assert c["ok"] and not c.get("na") and "eval mode" in c["detail"], c


def test_a_teacher_with_batchnorm_in_training_mode_fails_with_its_drift() -> None:
    c = frozen_check(distill("batchnorm"))
    assert not c["ok"] and not c.get("warn"), c
    assert "teacher.1.running_mean" in c["detail"] and "batch statistics" in c["detail"], c["detail"]


def test_a_teacher_without_mode_dependent_behaviour_is_not_applicable() -> None:
    c = frozen_check(distill("none"))
    assert c.get("na"), c


def test_no_frozen_module_is_not_applicable() -> None:
    c = frozen_check(classifier())
    assert c.get("na") and "no frozen module" in c["detail"], c


def test_dropout_in_a_frozen_encoder_under_a_trained_head_is_a_feature_not_a_failure() -> None:
    c = frozen_check(frozen_encoder(nn.Dropout(0.3)))
    assert c["ok"] and not c.get("na"), c
    assert "encoder" in c["detail"] and "feature" in c["detail"], c["detail"]


def test_a_teacher_in_training_mode_is_measured_under_the_runs_autocast() -> None:
    g = through(distill("dropout"), "forward", params={"precision": "bf16"})["forward"]
    c = check(g, frozenmode.NAME)
    assert not c["ok"] and "teacher" in c["detail"], c


def test_batchnorm_drifting_in_a_frozen_encoder_warns() -> None:
    c = frozen_check(frozen_encoder(nn.BatchNorm1d(16)))
    assert not c["ok"] and c.get("warn"), c
    assert "encoder.1.running_" in c["detail"], c["detail"]


def test_the_measurement_leaves_the_random_state_and_the_statistics_as_they_were() -> None:
    model = FrozenEncoder(nn.BatchNorm1d(16))
    model.train()
    x = torch.randn(8, 6)
    with frozenmode.recorder(model, {n for n, p in model.named_parameters() if p.requires_grad}) as calls:
        model(x)
    stats = model.encoder[1].running_mean.clone()
    state = torch.get_rng_state()
    m = frozenmode.measure(calls["encoder"])
    assert m.drift > 0 and m.modes > 0
    assert torch.equal(model.encoder[1].running_mean, stats) and torch.equal(torch.get_rng_state(), state)
    assert model.encoder.training


# --------------------------------------------------------------------------- state kept attached across updates


class TrackedLoss:
    """A loss object that keeps every step's loss for a plot: as tensors (the defect) or detached."""

    def __init__(self, detach: bool) -> None:
        self.detach = detach
        self.history: list[torch.Tensor] = []

    def __call__(self, m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
        loss = F.cross_entropy(m(b["x"]), b["labels"])
        self.history.append(loss.detach() if self.detach else loss)
        return loss


def running_total(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
    loss = F.cross_entropy(m(b["x"]), b["labels"])
    m.loss_total = getattr(m, "loss_total", 0.0) + loss  # a running total kept as a tensor on the model
    return loss


def kept_check(task: Task) -> dict[str, Any]:
    return check(through(task, "update_second")["update_second"], attached.NAME)


def test_a_loss_history_kept_as_tensors_fails_naming_the_attribute() -> None:
    c = kept_check(classifier(loss=TrackedLoss(detach=False)))
    assert not c["ok"] and not c.get("warn"), c
    assert "TrackedLoss (Task.loss).history" in c["detail"] and "loss.item()" in c["detail"], c["detail"]


def test_a_running_total_on_the_model_fails_with_its_growing_graph() -> None:
    c = kept_check(classifier(loss=running_total))
    assert not c["ok"] and not c.get("warn"), c
    assert "Sequential.loss_total" in c["detail"] and "graph nodes" in c["detail"], c["detail"]


def test_a_detached_history_passes_with_its_size() -> None:
    c = kept_check(classifier(loss=TrackedLoss(detach=True)))
    assert c["ok"], c
    assert "history grows by" in c["detail"] and "no graph attached" in c["detail"], c["detail"]


def test_spectral_norms_recomputed_weight_is_not_state() -> None:
    build = lambda p: nn.Sequential(nn.utils.spectral_norm(nn.Linear(6, 32)), nn.ReLU(), nn.Linear(32, 3))  # noqa: E731
    c = kept_check(classifier(build_model=build))
    assert c["ok"] and "no tensor" in c["detail"], c


def test_a_plain_classifier_keeps_nothing() -> None:
    c = kept_check(classifier())
    assert c["ok"] and "no tensor" in c["detail"], c


# --------------------------------------------------------------------------- float inputs in their range


def _image_data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for split, n, base in (("train", 32, 0), ("val", 8, 1000)):
        out[split] = [{"id": f"{split}{i}", "group": f"{split}{i}", "seed": base + i} for i in range(n)]
    return out


def _pixels(e: dict[str, Any]) -> torch.Tensor:
    g = torch.Generator().manual_seed(e["seed"])
    return torch.rand(3, 8, 8, generator=g)  # an image as ToTensor gives it: [0, 1]


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def image_task(transform: Any, **extras: Any) -> Task:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        x = torch.stack([transform(_pixels(e), e) for e in examples])
        return {"pixel_values": x, "labels": torch.tensor([e["seed"] % 2 for e in examples])}

    return Task(
        build_model=lambda p: nn.Sequential(nn.Flatten(), nn.Linear(192, 2)),
        datasets=_image_data,
        collate=collate,
        loss=lambda m, b: F.cross_entropy(m(b["pixel_values"]), b["labels"]),
        kind="classification",
        label_names=["even", "odd"],
        input_key="pixel_values",
        extras=extras,
    )


def normalise(x: torch.Tensor) -> torch.Tensor:
    mean, std = (torch.tensor(v)[:, None, None] for v in IMAGENET)
    return (x - mean) / std


def range_check(task: Task) -> dict[str, Any]:
    return check(through(task, "data")["data"], "float inputs in range")


def test_normalised_images_pass_with_their_figures() -> None:
    c = range_check(image_task(lambda x, e: normalise(x), image_mean=IMAGENET[0], image_std=IMAGENET[1]))
    assert c["ok"] and "pixel_values: mean" in c["detail"], c


def test_raw_pixel_values_warn_never_normalised() -> None:
    c = range_check(image_task(lambda x, e: (x * 255).round()))
    assert not c["ok"] and c.get("warn") and "never normalised" in c["detail"], c


def test_images_normalised_twice_warn_against_the_declared_normaliser() -> None:
    c = range_check(image_task(lambda x, e: normalise(normalise(x)), image_mean=IMAGENET[0], image_std=IMAGENET[1]))
    assert not c["ok"] and c.get("warn") and "normalised again" in c["detail"], c


def test_images_normalised_twice_warn_without_a_declaration() -> None:
    c = range_check(image_task(lambda x, e: normalise(normalise(x))))
    assert not c["ok"] and c.get("warn") and "normalised twice" in c["detail"], c


def test_images_in_zero_one_warn_only_when_a_normaliser_is_declared() -> None:
    assert range_check(image_task(lambda x, e: x))["ok"]
    c = range_check(image_task(lambda x, e: x, image_mean=IMAGENET[0], image_std=IMAGENET[1]))
    assert not c["ok"] and c.get("warn") and "never normalised" in c["detail"], c


def test_a_split_normalised_apart_warns() -> None:
    c = range_check(image_task(lambda x, e: normalise(x) if e["seed"] < 1000 else x * 255))
    assert not c["ok"] and c.get("warn") and "in val" in c["detail"], c


def test_scan_values_far_beyond_normalised_warn() -> None:
    c = range_check(image_task(lambda x, e: x * 3000 - 1000))  # Hounsfield-like units
    assert not c["ok"] and c.get("warn") and "far beyond" in c["detail"], c


def test_token_ids_only_are_not_applicable() -> None:
    from tests.gates.test_phases import lm

    c = range_check(lm())
    assert c.get("na"), c


def test_float_targets_are_not_inputs() -> None:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        x = torch.tensor([e["x"] for e in examples])
        return {"x": x, "labels": 1000 * x[:, :1]}  # a target on its own scale is no input out of range

    task = classifier(
        collate=collate, kind="other", label_names=None, loss=lambda m, b: F.mse_loss(m(b["x"])[:, :1], b["labels"])
    )
    c = range_check(task)
    assert c["ok"] and "x: mean" in c["detail"] and "labels" not in c["detail"], c


def test_an_image_size_is_a_hint_only_where_someone_chose_it() -> None:
    from transformers import ConvNextConfig, ViTConfig

    class Model(nn.Module):
        def __init__(self, config: Any) -> None:
            super().__init__()
            self.config = config

    assert ranges.declared(None, Model(ConvNextConfig())).image_size is None  # the class's default, unused
    assert ranges.declared(None, Model(ViTConfig(image_size=8))).image_size == 8
    stats = inputrange.FieldStats()
    stats.add(torch.rand(4, 3, 64, 64) * 2 - 1, None)
    assert "resized far" in " ".join(ranges.size_causes("pixel_values", stats, ranges.Declared(image_size=8)))


# --------------------------------------------------------------------------- every trained tensor is registered

REGISTERED = "every trained tensor is registered"


class Blocks(nn.Module):
    """Two hidden layers and a learned output scale, held as ``how`` says: "registered" (nn.ModuleList and
    nn.Parameter), "list" (a plain Python list of layers), "tensor" (the scale a tensor with requires_grad=True)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        layers = [nn.Linear(6, 16), nn.Linear(16, 16)]
        self.blocks: Any = nn.ModuleList(layers) if how != "list" else layers
        self.out = nn.Linear(16, 3)
        self.scale: Any = torch.ones(3, requires_grad=True) if how == "tensor" else nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = torch.relu(b(x))
        return self.out(x) * self.scale


def blocks(how: str, **kw: Any) -> Task:
    return classifier(build_model=lambda p: Blocks(how), **kw)


def test_a_model_whose_trained_tensors_are_all_registered_passes() -> None:
    c = check(through(blocks("registered"), "backward")["backward"], REGISTERED)
    assert c["ok"] and not c.get("na"), c


def test_layers_in_a_plain_list_and_a_tensor_made_with_requires_grad_fail_naming_where_the_model_holds_them() -> None:
    c = check(through(blocks("list"), "backward")["backward"], REGISTERED)
    assert not c["ok"], c
    assert "blocks[0].weight [16, 6]" in c["detail"] and "blocks[1].bias" in c["detail"], c["detail"]
    assert "never updates them" in c["detail"] and "nn.ModuleList" in c["detail"], c["detail"]
    t = check(through(blocks("tensor"), "backward")["backward"], REGISTERED)
    assert not t["ok"] and "scale [3]" in t["detail"] and "nn.Parameter" in t["detail"], t


def test_a_tensor_the_optimizer_updates_but_no_state_dict_holds_is_named_as_lost_at_every_checkpoint() -> None:
    def optimizer(model: nn.Module, params: dict[str, Any]) -> torch.optim.Optimizer:
        return torch.optim.AdamW([*model.parameters(), model.scale], lr=1e-3)

    c = check(through(blocks("tensor", optimizer=optimizer), "backward")["backward"], REGISTERED)
    assert not c["ok"] and "checkpoint and export loses" in c["detail"], c


def test_a_perturbation_made_in_the_loss_is_not_the_models_and_is_left_alone() -> None:
    def loss(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
        delta = torch.zeros_like(b["x"], requires_grad=True)  # an adversarial perturbation, the loss's own
        return F.cross_entropy(m(b["x"] + delta), b["labels"])

    c = check(through(blocks("registered", loss=loss), "backward")["backward"], REGISTERED)
    assert c["ok"], c


# --------------------------------------------------------------------------- targets scored against their own example

OWN = "targets scored against their own example"


def test_targets_reordered_apart_from_the_outputs_are_named_at_data() -> None:
    """A roll or a sort of the labels inside the loss: every gate but the overfit's (a vague warning) passed it."""
    for reorder in (lambda y: torch.roll(y, 1), lambda y: y.sort().values):

        def loss(m: nn.Module, b: dict[str, Any], reorder: Any = reorder) -> torch.Tensor:
            return F.cross_entropy(m(b["x"]), reorder(b["labels"]))

        c = check(through(classifier(loss=loss), "data")["data"], OWN)
        assert not c["ok"] and "and not at its own" in c["detail"] and "index off by one" in c["detail"], c


def test_a_loss_that_reads_only_the_first_example_is_named_at_data() -> None:
    def loss(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
        return F.cross_entropy(m(b["x"])[:1], b["labels"][:1])

    c = check(through(classifier(loss=loss), "data")["data"], OWN)
    assert not c["ok"] and "reads only part of the batch" in c["detail"], c
    ok = check(through(classifier(), "data")["data"], OWN)
    assert ok["ok"] and "at its own output" in ok["detail"], ok


# --------------------------------------------------------------------------- weights loaded where they belong

LOADED = "weights loaded where they belong"


def pretrained(tmp_path: Any, saved: str, head: bool = False) -> Task:
    """build_model loads a checkpoint with strict=False: saved from the bare model ("bare"), from a DDP wrapper
    ("ddp": every key prefixed module.); ``head``: a new head the file does not hold (fine-tuning)."""
    path = tmp_path / "pretrained.pt"
    torch.manual_seed(1)
    body = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
    state = body.state_dict()
    if saved == "ddp":
        state = {f"module.{k}": v for k, v in state.items()}
    if head:
        state = {k: v for k, v in state.items() if not k.endswith(("2.weight", "2.bias"))}
    torch.save(state, path)

    def build(params: dict[str, Any]) -> nn.Module:
        model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
        model.load_state_dict(torch.load(path, weights_only=True), strict=False)
        return model

    return classifier(build_model=build)


def test_a_checkpoint_saved_from_a_ddp_wrapper_and_loaded_non_strict_is_named_as_loading_nothing(tmp_path: Any) -> None:
    c = check(through(pretrained(tmp_path, "ddp"), "forward")["forward"], LOADED)
    assert not c["ok"], c
    assert "filled 0 of its 4 keys" in c["detail"] and "prefix 'module.'" in c["detail"], c["detail"]


def test_a_whole_load_and_a_new_head_over_a_loaded_body_pass(tmp_path: Any) -> None:
    c = check(through(pretrained(tmp_path, "bare"), "forward")["forward"], LOADED)
    assert c["ok"] and "4 of 4 keys" in c["detail"], c
    h = check(through(pretrained(tmp_path, "bare", head=True), "forward")["forward"], LOADED)
    assert h["ok"] and "2 of 4 keys, 2 of the model's not in the file" in h["detail"], h
    none = check(through(classifier(), "forward")["forward"], LOADED)
    assert none.get("na") and "loaded no state dict" in none["detail"], none


def test_a_tensor_the_forward_makes_and_keeps_on_the_model_is_not_a_weight_left_out() -> None:
    """A physics-informed network differentiates by its input coordinates, made requires_grad in forward and kept
    on the model: a leaf of the loss outside the parameters, but the forward's, not a weight."""

    class Coords(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(6, 3)
            self.coords: torch.Tensor | None = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.coords = x.detach().clone().requires_grad_(True)
            return self.net(self.coords)

    c = check(through(classifier(build_model=lambda p: Coords()), "backward")["backward"], REGISTERED)
    assert c["ok"], c


def test_a_plain_state_dict_loaded_into_a_compiled_wrapper_says_to_load_the_inner_model(tmp_path: Any) -> None:
    path = tmp_path / "plain.pt"
    torch.manual_seed(1)
    torch.save(nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3)).state_dict(), path)

    class Wrapped(nn.Module):  # keys prefixed _orig_mod., as torch.compile's wrapper has them
        def __init__(self) -> None:
            super().__init__()
            self._orig_mod = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self._orig_mod(x)

    def build(params: dict[str, Any]) -> nn.Module:
        model = Wrapped()
        model.load_state_dict(torch.load(path, weights_only=True), strict=False)
        return model

    c = check(through(classifier(build_model=build), "forward")["forward"], LOADED)
    assert not c["ok"] and "the model's keys carry the prefix '_orig_mod.'" in c["detail"], c
    assert "model._orig_mod" in c["detail"], c["detail"]
