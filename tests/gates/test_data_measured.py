"""The data gate measures where it can and says *not applicable* where a check's precondition does not hold.

Each test runs the stack and data phases in this process (``Context.in_memory``) on a tiny task written as a
user writes one: a self-supervised objective with no labels, audio frames with a (B, T) mask, an
encoder-decoder, a causal LM whose loss shifts while the declaration says otherwise, a forgotten shift,
labels shifted twice, a target broadcast against every output, a collate that repeats one example.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.context import Context
from cockpit.pilot.gate import Gate
from cockpit.pilot.phases import PHASES
from cockpit.pilot.pilot import run_phase
from cockpit.pilot.task import Task
from tests.gates.test_phases import classifier, through

PARAMS = {"microbatch": 4, "accumulation": 1, "lr": 1e-3, "device": "cpu", "updates": 4, "eval_microbatch": 8}
VOCAB = 16


def data_gate(task: Task) -> tuple[Gate, Task]:
    ctx = Context.in_memory(task, PARAMS)
    g = None
    for phase in PHASES:
        g, _ = run_phase(ctx, phase)
        if phase.name == "data":
            return g, ctx.the_task
    raise AssertionError("no data phase")


def check(g: Gate, name: str) -> dict[str, Any]:
    found = [c for c in g.checks if c["name"] == name]
    assert found, (name, [c["name"] for c in g.checks])
    return found[-1]


def split(n: int, make: Any) -> dict[str, list[dict[str, Any]]]:
    return {
        s: [{"id": f"{s}{i}", **make(i + (0 if s == "train" else n))} for i in range(n if s == "train" else 8)]
        for s in ("train", "val")
    }


# --------------------------------------------------------------------------- self-supervised, audio frames


def images(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(16, lambda i: {"x": torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(i)).tolist()})


class Denoiser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def denoise_loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    noise = torch.randn_like(batch["x"])  # the target is drawn inside the loss
    return F.mse_loss(model(batch["x"] + noise), noise)


def test_a_self_supervised_batch_without_labels_passes_the_data_gate_with_label_checks_not_applicable() -> None:
    task = Task(
        build_model=lambda p: Denoiser(),
        datasets=images,
        collate=lambda ex, p: {"x": torch.tensor([e["x"] for e in ex])},
        loss=denoise_loss,
        kind="other",
        input_key="x",
    )
    g, _ = data_gate(task)
    assert g.verdict.value == "pass", g.checks
    present = check(g, "targets present")
    assert present.get("na") and "makes its own targets" in present["detail"]
    assert check(g, "no batch entirely ignored").get("na")


def frames(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(16, lambda i: {"n": 5 + i % 4, "y": i % 3})


def frame_collate(every: int) -> Any:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        t = max(e["n"] for e in examples)
        feats = torch.zeros(len(examples), t, 3)
        mask = torch.zeros(len(examples), t, dtype=torch.long)
        for r, e in enumerate(examples):
            feats[r, : e["n"]] = torch.randn(e["n"], 3, generator=torch.Generator().manual_seed(r))
            mask[r, : e["n"]] = 1
        return {"feats": feats, "attention_mask": mask[:, ::every], "labels": torch.tensor([e["y"] for e in examples])}

    return collate


class Pool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(3, 3)

    def forward(self, feats: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> Any:
        if attention_mask.shape == feats.shape[:2]:  # a mean over the real frames only
            m = attention_mask[..., None].float()
            logits = self.out((feats * m).sum(1) / m.sum(1))
        else:
            logits = self.out(feats.mean(1))
        return {"logits": logits, "loss": F.cross_entropy(logits, labels)}


def frame_task(every: int) -> Task:
    return Task(
        build_model=lambda p: Pool(),
        datasets=frames,
        collate=frame_collate(every),
        kind="classification",
        label_names=["a", "b", "c"],
        input_key="feats",
    )


def test_a_frame_mask_of_the_features_batch_and_time_fits_and_one_of_another_length_fails() -> None:
    g, _ = data_gate(frame_task(1))  # (B, T) mask of (B, T, F) features
    assert not [c for c in g.checks if not c["ok"]], g.checks
    g, _ = data_gate(frame_task(2))  # a mask at half the frame rate
    c = check(g, "attention mask")
    assert not c["ok"] and "attention_mask (16, 4) vs feats (16, 8, 3)" in c["detail"], c


# --------------------------------------------------------------------------- encoder-decoder


def seq2seq(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(16, lambda i: {"src": [1 + (i + k) % 12 for k in range(6 + i % 3)], "tgt": [2 + i % 5, 3, 4]})


def t5_collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    width = max(len(e["src"]) for e in examples)
    src = torch.zeros(len(examples), width, dtype=torch.long)
    for r, e in enumerate(examples):
        src[r, : len(e["src"])] = torch.tensor(e["src"])
    return {
        "input_ids": src,
        "attention_mask": (src != 0).long(),
        "labels": torch.tensor([e["tgt"] for e in examples]),
    }


def t5(params: dict[str, Any]) -> Any:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, dropout_rate=0.0,
        decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return T5ForConditionalGeneration(config)


# --------------------------------------------------------------------------- causal LMs: the shift, measured


def windows(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(24, lambda i: {"toks": [(i + k) % VOCAB for k in range(9)]})


class Bigram(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids))


def same(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["toks"][:-1] for e in examples])
    return {"input_ids": x, "labels": x.clone()}  # labels = inputs: right only if the loss shifts


def next_tokens(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {
        "input_ids": torch.tensor([e["toks"][:-1] for e in examples]),
        "labels": torch.tensor([e["toks"][1:] for e in examples]),
    }


def shifting(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
    logits = m(b["input_ids"])[:, :-1]
    return F.cross_entropy(logits.reshape(-1, VOCAB), b["labels"][:, 1:].reshape(-1))


def plain(m: nn.Module, b: dict[str, Any]) -> torch.Tensor:
    return F.cross_entropy(m(b["input_ids"]).reshape(-1, VOCAB), b["labels"].reshape(-1))


def lm(collate: Any, loss: Any, convention: str = "aligned") -> Task:
    return Task(
        build_model=lambda p: Bigram(),
        datasets=windows,
        collate=collate,
        loss=loss,
        kind="generation",
        label_convention=convention,
        vocab_size=lambda p: VOCAB,
    )


def test_a_loss_that_shifts_passes_with_the_default_convention_and_the_measurement_is_used_later() -> None:
    g, task = data_gate(lm(same, shifting))  # the user left label_convention at its default, "aligned"
    c = check(g, "targets aligned as declared")
    assert c["ok"] and "declares 'aligned', measured 'shift_in_loss'" in c["detail"], c
    assert task.label_convention == "shift_in_loss"


def test_a_forgotten_shift_and_labels_shifted_twice_fail_whatever_is_declared() -> None:
    for convention in ("aligned", "shift_in_loss"):
        g, _ = data_gate(lm(same, plain, convention))  # nobody shifts: output t is scored against input t
        c = check(g, "targets aligned as declared")
        assert not c["ok"] and "copy its input" in c["detail"], (convention, c)
        g, _ = data_gate(lm(next_tokens, shifting, convention))  # shifted in the collate and again in the loss
        c = check(g, "targets aligned as declared")
        assert not c["ok"] and "shifted twice" in c["detail"], (convention, c)
    g, _ = data_gate(lm(next_tokens, plain))
    assert check(g, "targets aligned as declared")["ok"]


# --------------------------------------------------------------------------- which example a target reaches


def table(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return split(16, lambda i: {"x": [float(i % 5), float(i % 3)], "y": float(i % 5) - float(i % 3)})


def regression(shape: tuple[int, ...], repeat_first: bool = False) -> Task:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        rows = [examples[0]] * len(examples) if repeat_first else examples
        return {
            "x": torch.tensor([e["x"] for e in rows]),
            "labels": torch.tensor([e["y"] for e in examples]).reshape(shape),
        }

    return Task(
        build_model=lambda p: nn.Linear(2, 1),
        datasets=table,
        collate=collate,
        loss=lambda m, b: F.mse_loss(m(b["x"]), b["labels"]),
        kind="other",
        input_key="x",
    )


def test_a_target_broadcast_against_every_output_fails() -> None:
    g, _ = data_gate(regression((-1, 1)))
    assert check(g, "targets scored against their own example")["ok"]
    g, _ = data_gate(regression((-1,)))  # (B,) against the model's (B, 1): mse_loss broadcasts to (B, B)
    c = check(g, "targets scored against their own example")
    assert not c["ok"] and "every example's output" in c["detail"], c


def test_a_collate_that_repeats_one_examples_input_fails() -> None:
    g, _ = data_gate(regression((-1, 1), repeat_first=True))
    c = check(g, "rows differ where examples differ")
    assert not c["ok"] and c["detail"].startswith("x is identical in every row"), c
    g, _ = data_gate(regression((-1, 1)))
    assert check(g, "rows differ where examples differ")["ok"]


def test_decoder_targets_padded_with_a_real_token_fail() -> None:
    def padded(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        b = t5_collate(examples, params)
        rows = [[2 + (r + j) % 10 for j in range((5, 3, 1)[r % 3])] for r in range(len(examples))]
        labels = torch.zeros(len(examples), 5, dtype=torch.long)  # padded with the pad token, 0
        for r, row in enumerate(rows):
            labels[r, : len(row)] = torch.tensor(row)
        return {**b, "labels": labels}

    task = Task(build_model=t5, datasets=seq2seq, collate=padded, kind="generation", vocab_size=lambda p: VOCAB)
    g, _ = data_gate(task)
    c = check(g, "padding not in the loss")
    assert not c["ok"] and "padded with token 0" in c["detail"], c
    g, _ = data_gate(Task(**{**task.__dict__, "collate": t5_collate}))
    assert not [c for c in g.checks if c["name"] == "padding not in the loss" and not c["ok"]]


def test_a_loss_mask_key_the_collate_never_writes_fails_naming_the_collate() -> None:
    """Task.loss_mask_key names the batch's mask of the positions that count; a key the collate does not write
    left every check that reads it skipped in silence (the fuzz's loss_mask_key_missing passed every gate)."""
    from cockpit.pilot.phases import declared

    c = check(through(classifier(loss_mask_key="answer_mask"), "data")["data"], declared.KEYS)
    assert not c["ok"] and "Task.loss_mask_key is 'answer_mask'" in c["detail"], c
    assert "(_cls_collate)" in c["detail"] and "labels, x" in c["detail"], c
    assert all(x["name"] != declared.KEYS for x in through(classifier(), "data")["data"].checks)


def _splits(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {"train": [{"id": "a", "x": [0.0] * 6, "y": 0}], "val": []}  # the splits, not examples


def _no_x(params: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": "c0", "text": "hello", "y": 0}]  # not what the collate reads


def _first_val(params: dict[str, Any]) -> list[dict[str, Any]]:
    from tests.gates.test_phases import _cls_data

    return _cls_data(params)["val"][:2]


def test_control_inputs_are_checked_at_the_data_gate_not_after_the_whole_pilot() -> None:
    """The examples control_inputs gives the export were first used at the last phase, and a mistake there was
    blamed on the collate ('string indices must be integers' for a dict of splits)."""
    from cockpit.pilot.phases import declared
    from tests.gates.test_phases import PARAMS

    ctx = Context.in_memory(classifier(control_inputs=_splits), PARAMS)
    g, ended = run_phase(ctx, next(p for p in PHASES if p.name == "data"))
    assert ended is not None and "control_inputs() raised TypeError in data" in str(ended), ended
    said = " ".join(c["detail"] for c in g.checks if not c["ok"])
    assert "control_inputs() raised TypeError: returned a dict (keys train, val), not a list of examples" in said, said
    c = check(through(classifier(control_inputs=_no_x), "data")["data"], declared.CONTROLS)
    assert not c["ok"] and "(_no_x) returns for the replay after export do not collate" in c["detail"], c
    assert "KeyError" in c["detail"], c
    c = check(through(classifier(control_inputs=_first_val), "data")["data"], declared.CONTROLS)
    assert c["ok"] and c["detail"].startswith("2 examples from "), c


def _one_id(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    from tests.gates.test_phases import _cls_collate

    return {**_cls_collate(examples, params), "ids": [examples[0]["id"]]}  # one id for the whole batch


def test_validation_says_why_ids_are_missing_when_every_example_was_evaluated() -> None:
    """'80/80 examples evaluated; missing [...]' contradicted itself: the collate returned one id per batch."""
    gates = through(classifier(collate=_one_id), "validation")
    assert not check(gates["data"], "batch carries ids")["ok"]
    c = check(gates["validation"], "complete outputs")
    assert not c["ok"] and "16/16 examples evaluated, but the batches' ids name 2 (2 distinct)" in c["detail"], c
    assert "(_one_id)" in c["detail"], c
