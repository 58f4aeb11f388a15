"""Each phase's checks run in this process on a tiny in-memory task: no subprocess, no run folder, no notebook.

A :class:`cockpit.pilot.context.Context` built with ``Context.in_memory`` holds
the task object; ``run_phase`` runs one phase within the meter's bounds and
returns its gate, exactly as the pilot records it.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.context import Context
from cockpit.pilot.gate import Gate
from cockpit.pilot.phases import BY_NAME, PHASES
from cockpit.pilot.pilot import run_phase
from cockpit.pilot.task import Task

PARAMS = {"microbatch": 4, "accumulation": 2, "lr": 1e-2, "device": "cpu", "updates": 20, "eval_microbatch": 8}


# --------------------------------------------------------------------------- tiny tasks


def _cls_data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 64), ("val", 16)):
        for i in range(n):
            x = [rng.gauss(0, 1) for _ in range(6)]
            out[split].append({"id": f"{split}{i}", "group": f"{split}{i}", "x": x, "y": int(x[0] > 0) + int(x[1] > 0)})
    return out


def _cls_collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {"x": torch.tensor([e["x"] for e in examples]), "labels": torch.tensor([e["y"] for e in examples])}


def classifier(**kw: Any) -> Task:
    """A small MLP classifier; ``kw`` replaces any Task field."""
    fields: dict[str, Any] = dict(
        build_model=lambda p: nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3)),
        datasets=_cls_data,
        collate=_cls_collate,
        loss=lambda m, b: F.cross_entropy(m(b["x"]), b["labels"]),
        kind="classification",
        label_names=["neg", "mid", "pos"],
        input_key="x",
    )
    fields.update(kw)
    return Task(**fields)


VOCAB = 12


def _lm_data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Sequences of increasing tokens of different lengths (next token = this one + 1)."""
    rng = random.Random(1)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 48), ("val", 8)):
        for i in range(n):
            start, length = rng.randrange(VOCAB), rng.randint(3, 9)
            out[split].append({"id": f"{split}{i}", "toks": [(start + k) % VOCAB for k in range(length + 1)]})
    return out


def _lm_collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    width = max(len(e["toks"]) for e in examples) - 1
    x = torch.zeros((len(examples), width), dtype=torch.long)
    y = torch.full((len(examples), width), -100, dtype=torch.long)
    for r, e in enumerate(examples):
        n = len(e["toks"]) - 1
        x[r, :n] = torch.tensor(e["toks"][:-1])
        y[r, :n] = torch.tensor(e["toks"][1:])
    return {"input_ids": x, "labels": y}


class Bigram(nn.Module):
    """Position t sees token t only: causal by construction. ``peek``: it sees token t + 1 too (broken)."""

    def __init__(self, peek: bool = False):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.out = nn.Linear(16, VOCAB)
        self.peek = peek

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        if self.peek:
            h = h + torch.roll(h, -1, dims=1)
        return self.out(h)


def _sum_count(m: nn.Module, b: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = m(b["input_ids"])
    total = F.cross_entropy(logits.reshape(-1, VOCAB), b["labels"].reshape(-1), ignore_index=-100, reduction="sum")
    return total, (b["labels"] != -100).sum()


def _mean(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
    logits = m(b["input_ids"])
    return F.cross_entropy(logits.reshape(-1, VOCAB), b["labels"].reshape(-1), ignore_index=-100)


def lm(**kw: Any) -> Task:
    fields: dict[str, Any] = dict(
        build_model=lambda p: Bigram(bool(p.get("peek"))),
        datasets=_lm_data,
        collate=_lm_collate,
        loss=_sum_count,
        kind="generation",
        vocab_size=lambda p: VOCAB,
        length=lambda e: len(e["toks"]) - 1,
    )
    fields.update(kw)
    return Task(**fields)


def through(
    task: Task, last: str, params: dict[str, Any] | None = None, pilot: dict[str, Any] | None = None, tmp: Any = None
) -> dict[str, Gate]:
    """Run the phases in order up to ``last`` in this process; their gates by name."""
    ctx = Context.in_memory(task, {**PARAMS, **(params or {})}, pilot=pilot, rdir=tmp)
    gates: dict[str, Gate] = {}
    for phase in PHASES:
        g, ended = run_phase(ctx, phase)
        gates[phase.name] = g
        assert ended is None, (phase.name, g.checks)
        if phase.name == last:
            return gates
    raise AssertionError(f"no phase {last}")


def check(g: Gate, name: str) -> dict[str, Any]:
    return next(c for c in g.checks if c["name"] == name)


# --------------------------------------------------------------------------- data


def test_data_phase_in_process_names_duplicated_ids() -> None:
    def dup(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        d = _cls_data(params)
        d["val"][0] = {**d["val"][0], "id": "train3"}
        return d

    g = through(classifier(datasets=dup), "data")["data"]
    c = check(g, "identifiers unique")
    assert not c["ok"] and "'train3' at train[3] and val[0]" in c["detail"]


def test_examples_without_ids_or_groups_are_named_by_position() -> None:
    def bare(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        return {k: [{"x": e["x"], "y": e["y"]} for e in v] for k, v in _cls_data(params).items()}

    g = through(classifier(datasets=bare), "data")["data"]
    assert g.verdict.value == "pass", g.checks
    assert "named by split and position" in check(g, "identifiers present")["detail"]
    assert "each example is its own" in check(g, "leakage group present")["detail"]
    assert "Cockpit attaches the ids" in check(g, "batch carries ids")["detail"]


def test_seeded_random_collate_passes_and_an_unseeded_one_is_named() -> None:
    def masked(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        b = _cls_collate(examples, params)
        b["x"] = b["x"] * (torch.rand_like(b["x"]) > 0.15)  # random masking from torch's global generator
        return b

    g = through(classifier(collate=masked), "data")["data"]
    c = check(g, "collate deterministic")
    assert c["ok"] and "reproducibly from the seed" in c["detail"]
    own = torch.Generator()  # a generator of its own, never seeded by the run

    def unseeded(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        b = _cls_collate(examples, params)
        b["x"] = b["x"] + torch.randn(b["x"].shape, generator=own)
        return b

    g = through(classifier(collate=unseeded), "data")["data"]
    c = check(g, "collate deterministic")
    assert not c["ok"] and c.get("warn") and "generator of its own" in c["detail"]


def test_labels_shifted_twice_are_caught() -> None:
    def twice(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        b = _lm_collate(examples, params)
        b["labels"] = torch.roll(b["labels"], -1, dims=1)  # shifted again
        b["labels"][:, -1] = -100
        return b

    g = through(lm(collate=twice), "data")["data"]
    c = check(g, "targets aligned as declared")
    assert not c["ok"] and "two tokens ahead" in c["detail"]
    ok = through(lm(), "data")["data"]
    assert check(ok, "targets aligned as declared")["ok"]


# --------------------------------------------------------------------------- forward: semantic checks


def test_probabilities_into_a_cross_entropy_fail() -> None:
    def softmaxed(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
        return F.cross_entropy(m(b["x"]), b["labels"])

    task = classifier(build_model=lambda p: nn.Sequential(nn.Linear(6, 3), nn.Softmax(-1)), loss=softmaxed)
    ctx = Context.in_memory(task, PARAMS)
    for phase in PHASES[:4]:
        g, _ = run_phase(ctx, phase)
    c = check(g, "outputs are logits")
    assert not c["ok"] and "probabilities" in c["detail"]


def test_activation_checkpointing_without_a_hook_is_a_warning() -> None:
    g = through(classifier(), "forward", {"activation_checkpointing": True})["forward"]
    c = check(g, "activation checkpointing applied")
    assert not c["ok"] and c["warn"] and "had no effect" in c["detail"]
    hooked = classifier(checkpointing=lambda model, on: None)
    assert check(
        through(hooked, "forward", {"activation_checkpointing": True})["forward"], "activation checkpointing applied"
    )["ok"]


# --------------------------------------------------------------------------- trainable set and optimizer


def test_trainable_set_is_the_users_and_disagreement_fails_backward() -> None:
    def frozen_first(p: dict[str, Any]) -> nn.Module:
        m = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
        m[0].requires_grad_(False)
        return m

    gates = through(classifier(build_model=frozen_first), "update_first")
    assert gates["forward"].inputs["trainable"] == 32 * 3 + 3  # what requires grad, not every parameter
    assert check(gates["update_first"], "frozen parameters unchanged")["ok"]
    ctx = Context.in_memory(
        classifier(build_model=frozen_first, trainable=lambda m: ["0.weight", "0.bias", "2.weight", "2.bias"]), PARAMS
    )
    for phase in PHASES[:5]:
        g, _ = run_phase(ctx, phase)
    c = check(g, "trainable as declared")
    assert g.phase == "backward" and not c["ok"] and "0.weight" in c["detail"] and "would not train" in c["detail"]


def test_the_users_optimizer_runs_and_is_checked_against_the_trainable_set() -> None:
    def half(model: nn.Module, params: dict[str, Any]) -> torch.optim.Optimizer:
        return torch.optim.SGD(list(model.parameters())[:2], lr=params["lr"])  # forgets the last layer

    g = through(classifier(optimizer=half), "update_first")["update_first"]
    c = check(g, "optimizer holds every trainable parameter")
    assert not c["ok"] and "2.weight" in c["detail"]
    good = through(classifier(optimizer=lambda m, p: torch.optim.SGD(m.parameters(), lr=p["lr"])), "update_first")
    assert "the task's optimizer (SGD" in good["forward"].inputs["optimizer"]


# --------------------------------------------------------------------------- accumulation


def test_accumulation_not_applicable_at_one_microbatch() -> None:
    g = through(classifier(), "accumulation", {"accumulation": 1})["accumulation"]
    assert g.verdict.value == "skipped" and "not applicable" in g.checks[0]["detail"]


def test_accumulation_sum_count_passes_and_uneven_mean_fails_with_its_cause() -> None:
    assert through(lm(), "accumulation")["accumulation"].verdict.value == "pass"
    g = through(lm(loss=_mean), "accumulation")["accumulation"]
    c = check(g, "accumulated == single batch")
    assert not c["ok"] and not c.get("warn") and "mean per microbatch over uneven counts" in c["detail"]


def test_accumulation_batchnorm_is_a_warning_measured_in_train_mode() -> None:
    def bn(p: dict[str, Any]) -> nn.Module:
        return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))

    g = through(classifier(build_model=bn), "accumulation")["accumulation"]
    c = check(g, "accumulated == single batch")
    assert c.get("warn") and "BatchNorm" in c["detail"] and g.extra["relative_difference"] > 1e-3


def test_accumulation_with_seeded_random_masking_is_not_applicable_not_a_warning() -> None:
    def masked(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        b = _cls_collate(examples, params)
        b["x"] = b["x"] * (torch.rand_like(b["x"]) > 0.3)
        return b

    def sum_count(m: nn.Module, b: dict[str, Any]) -> tuple[torch.Tensor, int]:
        return F.cross_entropy(m(b["x"]), b["labels"], reduction="sum"), len(b["labels"])

    g = through(classifier(collate=masked, loss=sum_count), "accumulation")["accumulation"]
    assert g.verdict.value == "n/a" and "cannot be compared" in g.checks[0]["detail"], g.checks


def test_accumulation_with_dropout_is_compared_without_it() -> None:
    def drop(p: dict[str, Any]) -> nn.Module:
        return nn.Sequential(nn.Linear(6, 32), nn.Dropout(0.5), nn.ReLU(), nn.Linear(32, 3))

    def sum_count(m: nn.Module, b: dict[str, Any]) -> tuple[torch.Tensor, int]:
        return F.cross_entropy(m(b["x"]), b["labels"], reduction="sum"), len(b["labels"])

    g = through(classifier(build_model=drop, loss=sum_count), "accumulation")["accumulation"]
    assert g.verdict.value == "pass", g.checks


# --------------------------------------------------------------------------- overfit


def test_overfit_passes_on_a_learnable_task_and_fails_when_the_output_ignores_the_input() -> None:
    g = through(classifier(), "overfit", {"accumulation": 1})["overfit"]
    assert g.verdict.value == "pass", g.checks
    assert g.extra["overfit"]["accuracy"] >= 0.9

    class Blind(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bias = nn.Parameter(torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bias.expand(x.shape[0], 3)

    ctx = Context.in_memory(
        classifier(build_model=lambda p: Blind()), {**PARAMS, "accumulation": 1}, pilot={"overfit_steps": 40}
    )
    gates = {}
    for phase in PHASES:
        g2, _ = run_phase(ctx, phase)
        gates[phase.name] = g2
        if phase.name == "overfit":
            break
    o = gates["overfit"]
    assert o.verdict.value == "fail" and {c["name"] for c in o.failures()} == {
        "loss falls below threshold",
        "targets recovered",
    }


def test_overfit_judges_token_accuracy_not_whole_examples() -> None:
    g = through(lm(), "overfit", pilot={"overfit_loss_ratio": 0.5})["overfit"]
    c = check(g, "targets recovered")
    assert c["ok"] and "supervised targets predicted right" in c["detail"], g.checks


# --------------------------------------------------------------------------- save and resume


def test_resume_in_process_restores_step_rate_and_data_position(tmp_path: Any) -> None:
    gates = through(classifier(), "resume", tmp=tmp_path)
    r = gates["resume"]
    assert r.verdict.value == "pass", r.checks
    assert check(r, "next losses equal the uninterrupted run")["detail"].startswith("bit-identical")


def test_a_trainable_only_checkpoint_leaves_frozen_weights_out_and_resumes_identically(tmp_path: Any) -> None:
    """[checkpoints] trainable_only: an adapter's checkpoint; the new process rebuilds the frozen weights."""

    def frozen_body(p: dict[str, Any]) -> nn.Module:
        m = nn.Sequential(nn.Linear(6, 256), nn.ReLU(), nn.Linear(256, 3))
        m[0].requires_grad_(False)
        return m

    sizes = {}
    for only in (False, True):
        rdir = tmp_path / str(only)
        rdir.mkdir()
        ctx = Context.in_memory(classifier(build_model=frozen_body), PARAMS, rdir=rdir)
        ctx.frozen["checkpoints"] = {"trainable_only": only}
        gates: dict[str, Gate] = {}
        for phase in PHASES:
            gates[phase.name], ended = run_phase(ctx, phase)
            assert ended is None, (phase.name, gates[phase.name].checks)
            if phase.name == "resume":
                break
        assert gates["resume"].verdict.value == "pass", gates["resume"].checks
        assert check(gates["resume"], "next losses equal the uninterrupted run")["detail"].startswith("bit-identical")
        sizes[only] = gates["save"].extra["bytes"]
        saved = torch.load(rdir / "checkpoint.pt", weights_only=True)
        assert ("0.weight" in saved["model"]) is (not only) and "2.weight" in saved["model"]
    assert sizes[True] < sizes[False] - 6 * 256 * 4  # the frozen 6x256 weight is not in it


@pytest.mark.parametrize("name", [p.name for p in PHASES])
def test_every_phase_is_one_unit_with_a_remedy(name: str) -> None:
    phase = BY_NAME[name]
    assert phase.remedy and phase.checks and callable(phase.run) and phase.doc


# --------------------------------------------------------------------------- splits and validation


class ColumnarSplit:
    """Behaves like a Hugging Face ``datasets.Dataset``: a row for an int, a dict of columns for a slice."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            part = self.rows[i]
            return {k: [r[k] for r in part] for k in part[0]} if part else {}
        return dict(self.rows[i])


def test_a_columnar_split_works_without_conversion() -> None:
    def columnar(params: dict[str, Any]) -> dict[str, Any]:
        return {k: ColumnarSplit(v) for k, v in _cls_data(params).items()}

    gates = through(classifier(datasets=columnar), "validation")
    assert all(g.verdict.value in ("pass", "skipped") for g in gates.values()), {
        n: g.checks for n, g in gates.items() if g.verdict.value not in ("pass", "skipped")
    }


def test_validation_names_a_module_left_in_training_mode() -> None:
    class Stubborn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(6, 3)
            self.noise = nn.Dropout(0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.noise.train()  # a bug: forced back into training mode on every call
            return self.lin(self.noise(x))

    g = through(classifier(build_model=lambda p: Stubborn()), "validation", {"accumulation": 1})["validation"]
    c = check(g, "deterministic")
    assert not c["ok"] and "noise" in c["detail"]
    assert g.extra["predictions"]["rows"] == 16 and "accuracy" in g.extra["predictions"]["metrics"]


def test_a_pretrained_start_below_uniform_is_no_warning() -> None:
    class Knows(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # a confident, right start (learned weights)
            y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
            return 5 * F.one_hot(y, 3).float() + 0 * self.lin(x)

    g = through(classifier(build_model=lambda p: Knows()), "forward")["forward"]
    c = check(g, "initial loss as the objective implies")
    assert c["ok"] and "learned weights" in c["detail"], c


# --------------------------------------------------------------------------- out of memory, phase by phase


@pytest.mark.parametrize(
    "phase,words",
    [
        ("forward", "lower the microbatch"),
        ("backward", "gradients"),
        ("update_first", "accumulation does not help"),
        ("update_second", "optimizer state resident"),
        ("worst_case", "longest batch"),
        ("validation", "eval_microbatch"),
        ("save", "host memory"),
        ("export", "host memory"),
    ],
)
def test_an_out_of_memory_gets_the_remedy_of_its_phase(
    phase: str, words: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("COCKPIT_INJECT", f"oom:{phase}")
    ctx = Context.in_memory(classifier(), PARAMS, rdir=tmp_path)
    for p in PHASES:
        g, ended = run_phase(ctx, p)
        if p.name == phase:
            break
        assert ended is None
    assert ended is not None and ended.outcome.status.value == "oom"
    assert g.verdict.value == "fail" and words in g.remedy, g.remedy
    assert ended.outcome.reason == f"out of memory in {phase}"
