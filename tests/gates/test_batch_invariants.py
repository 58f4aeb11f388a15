"""The batch invariants of the data gate (``phases/dependence.py``), each on a tiny task written as a user writes one:
every input field read (a mask never passed, timesteps at a scale the model cannot resolve), examples independent
(statistics of the batch in ``forward``; BatchNorm and pairwise scores expected), targets hidden from the model (a
labels tensor fed as a feature, the target column left in the features, a decoder that sees the next token)."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.context import Context
from cockpit.pilot.gate import Gate
from cockpit.pilot.phases import PHASES
from cockpit.pilot.pilot import run_phase
from cockpit.pilot.task import Task

PARAMS = {"microbatch": 4, "accumulation": 1, "lr": 1e-3, "device": "cpu", "updates": 4, "eval_microbatch": 8}
FIELDS, INDEPENDENT, HIDDEN = "every input field read", "examples independent", "targets hidden from the model"


def gates(task: Task, last: str = "data", params: dict[str, Any] | None = None) -> tuple[dict[str, Gate], Context]:
    ctx = Context.in_memory(task, {**PARAMS, **(params or {})})
    out: dict[str, Gate] = {}
    for phase in PHASES:
        g, ended = run_phase(ctx, phase)
        out[phase.name] = g
        assert ended is None, (phase.name, g.checks)
        if phase.name == last:
            return out, ctx
    raise AssertionError(f"no phase {last}")


def check(g: Gate, name: str) -> dict[str, Any]:
    found = [c for c in g.checks if c["name"] == name]
    assert found, (name, [c["name"] for c in g.checks])
    return found[-1]


# --------------------------------------------------------------------------- tabular tasks


def rows(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(0)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", 32), ("val", 8)):
        for i in range(n):
            x = [rng.gauss(0, 1) for _ in range(5)]
            length = rng.randint(2, 5)
            out[split].append({"id": f"{split}{i}", "x": x, "y": 2 * x[0] - x[1], "c": int(x[0] > 0), "length": length})
    return out


def tab_collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    x = torch.tensor([e["x"] for e in examples])
    mask = torch.tensor([[1.0] * e["length"] + [0.0] * (5 - e["length"]) for e in examples])
    return {"x": x, "mask": mask, "labels": torch.tensor([[e["y"]] for e in examples])}


class Masked(nn.Module):
    """Reads its features where ``mask`` is 1 (a padding mask over feature slots)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x * mask if mask is not None else x)


def regression(**kw: Any) -> Task:
    fields: dict[str, Any] = dict(
        build_model=lambda p: Masked(),
        datasets=rows,
        collate=tab_collate,
        loss=lambda m, b: F.mse_loss(m(b["x"], b["mask"]), b["labels"]),
        kind="other",
        input_key="x",
    )
    fields.update(kw)
    return Task(**fields)


def test_a_healthy_regression_reads_every_field_keeps_examples_apart_and_hides_its_target() -> None:
    g = gates(regression())[0]["data"]
    assert check(g, FIELDS)["ok"] and not check(g, FIELDS).get("na"), check(g, FIELDS)
    assert "'mask'" in check(g, FIELDS)["detail"]
    assert check(g, INDEPENDENT)["ok"] and not check(g, INDEPENDENT).get("na"), check(g, INDEPENDENT)
    assert check(g, HIDDEN)["ok"] and not check(g, HIDDEN).get("na"), check(g, HIDDEN)


def test_a_mask_the_model_takes_but_the_loss_never_passes_fails_naming_it() -> None:
    g = gates(regression(loss=lambda m, b: F.mse_loss(m(b["x"]), b["labels"])))[0]["data"]
    c = check(g, FIELDS)
    assert not c["ok"] and not c.get("warn"), c
    assert "'mask'" in c["detail"] and "never arrives" in c["detail"], c["detail"]


def test_a_field_nothing_reads_and_no_argument_names_is_a_warning() -> None:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        return {**tab_collate(examples, params), "weights": torch.rand(len(examples))}

    g = gates(regression(collate=collate))[0]["data"]
    c = check(g, FIELDS)
    assert not c["ok"] and c.get("warn"), c
    assert "'weights'" in c["detail"] and "nothing reads it" in c["detail"], c["detail"]


def test_a_mask_the_model_receives_and_does_not_use_is_said_not_held_against_it() -> None:
    class Unmasked(Masked):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            return self.net(x)  # a model whose design makes the mask irrelevant (a causal LM over right padding)

    c = check(gates(regression(build_model=lambda p: Unmasked()))[0]["data"], FIELDS)
    assert c["ok"] and "receives field 'mask'" in c["detail"], c


def test_statistics_of_the_batch_in_forward_mix_examples_and_the_gate_names_the_module() -> None:
    class Standardised(Masked):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            return super().forward((x - x.mean(0)) / (x.std(0) + 1e-6), mask)

    g = gates(regression(build_model=lambda p: Standardised()))[0]["data"]
    c = check(g, INDEPENDENT)
    assert not c["ok"] and not c.get("warn"), c
    assert "mixes the examples" in c["detail"] and "'net.0' (Linear)" in c["detail"], c["detail"]
    declared = gates(regression(build_model=lambda p: Standardised(), batch_statistics=True))[0]["data"]
    assert check(declared, INDEPENDENT)["ok"] and "expected" in check(declared, INDEPENDENT)["detail"]


def test_batchnorm_in_training_mode_is_no_leak_the_probe_measures_in_eval_mode() -> None:
    class Normed(Masked):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))

    g = gates(regression(build_model=lambda p: Normed()))[0]["data"]
    assert check(g, INDEPENDENT)["ok"] and not check(g, INDEPENDENT).get("na"), check(g, INDEPENDENT)


def test_a_leak_measured_at_data_is_named_by_the_accumulation_warning() -> None:
    class Standardised(Masked):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            return super().forward(x - x.mean(0), mask)

    found, _ = gates(regression(build_model=lambda p: Standardised()), "accumulation", {"accumulation": 2})
    c = check(found["accumulation"], "accumulated == single batch")
    assert not c["ok"] and c.get("warn"), c
    assert "examples independent" in c["detail"] and "mixes the examples" in c["detail"], c["detail"]


def test_labels_fed_to_the_model_as_a_feature_fail() -> None:
    class Peeks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(6, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.net(torch.cat([x, y], 1))

    g = gates(
        regression(build_model=lambda p: Peeks(), loss=lambda m, b: F.mse_loss(m(b["x"], b["labels"]), b["labels"]))
    )[0]["data"]
    c = check(g, HIDDEN)
    assert not c["ok"] and "receives its own targets" in c["detail"], c


def test_the_target_column_left_in_the_features_fails_naming_the_column() -> None:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        b = tab_collate(examples, params)
        b["x"] = torch.cat([b["x"][:, :4], b["labels"]], 1)
        return b

    g = gates(regression(collate=collate))[0]["data"]
    c = check(g, HIDDEN)
    assert not c["ok"] and "column 4 of 'x'" in c["detail"], c


# --------------------------------------------------------------------------- timesteps


def images(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def one(i: int) -> list[Any]:
        return torch.randn(1, 4, 4, generator=torch.Generator().manual_seed(i)).tolist()

    return {
        s: [{"id": f"{s}{i}", "img": one(i + 100 * (s == "val"))} for i in range(n)]
        for s, n in (("train", 16), ("val", 8))
    }


class Denoiser(nn.Module):
    """Embeds its timestep sinusoidally, for integer steps 0..99 as its scheduler counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.time = nn.Linear(16, 8)
        self.out = nn.Conv2d(8, 1, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        freqs = torch.exp(-math.log(10000.0) * torch.arange(8) / 8)
        emb = torch.cat([torch.sin(t.float()[:, None] * freqs), torch.cos(t.float()[:, None] * freqs)], 1)
        return self.out(torch.relu(self.conv(x) + self.time(emb)[:, :, None, None]))


def diffusion(scale: float | None) -> Task:
    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        clean = batch["img"]
        noise = torch.randn_like(clean)
        t = torch.randint(0, 100, (clean.shape[0],))
        noisy = clean * (1 - t[:, None, None, None] / 100) + noise * (t[:, None, None, None] / 100)
        return F.mse_loss(model(noisy, t if scale is None else t * scale), noise)

    return Task(
        build_model=lambda p: Denoiser(),
        datasets=images,
        collate=lambda ex, p: {"img": torch.tensor([e["img"] for e in ex])},
        loss=loss,
        kind="other",
        input_key="img",
    )


def test_timesteps_drawn_in_the_loss_are_read_as_integers_and_warned_about_when_divided_by_1000() -> None:
    ok = check(gates(diffusion(None))[0]["data"], FIELDS)
    assert ok["ok"] and "argument 't' of the model" in ok["detail"], ok
    bad = check(gates(diffusion(1 / 1000))[0]["data"], FIELDS)
    assert not bad["ok"] and bad.get("warn"), bad
    assert "argument 't'" in bad["detail"] and "scale it cannot resolve" in bad["detail"], bad["detail"]


# --------------------------------------------------------------------------- sequences and pairs

VOCAB = 12


def tokens(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(1)
    return {
        s: [
            {"id": f"{s}{i}", "toks": [(start + k) % VOCAB for k in range(9)]}
            for i, start in enumerate(rng.randrange(VOCAB) for _ in range(n))
        ]
        for s, n in (("train", 24), ("val", 8))
    }


class Bigram(nn.Module):
    """Position t sees token t only; ``peek``: token t + 1 too (a mask that lets it see ahead)."""

    def __init__(self, peek: bool) -> None:
        super().__init__()
        self.emb, self.out, self.peek = nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB), peek

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        return self.out(h + torch.roll(h, -1, dims=1) if self.peek else h)


def next_token(peek: bool) -> Task:
    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        ids = batch["ids_in"]
        logits = model(ids)[:, :-1]
        return F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))

    # kind "other": a preference or custom objective over a decoder, where the language-model checks do not apply
    return Task(
        build_model=lambda p: Bigram(peek),
        datasets=tokens,
        collate=lambda ex, p: {"ids_in": torch.tensor([e["toks"] for e in ex])},
        loss=loss,
        kind="other",
        input_key="ids_in",
    )


def test_an_output_that_reads_the_token_it_is_scored_against_fails_even_outside_a_language_model_task() -> None:
    ok = check(gates(next_token(False))[0]["data"], HIDDEN)
    assert ok["ok"] and "does not read" in ok["detail"], ok
    bad = check(gates(next_token(True))[0]["data"], HIDDEN)
    assert not bad["ok"] and "the output reads it" in bad["detail"] and "1 later" in bad["detail"], bad


def test_pairwise_scores_of_in_batch_negatives_are_not_a_leak() -> None:
    class Pair(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(5, 8), nn.Linear(5, 8)

        def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return F.normalize(self.a(x), dim=-1) @ F.normalize(self.b(z), dim=-1).T  # (B, B)

    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        scores = model(batch["x"], batch["x"].flip(1)) / 0.1
        return F.cross_entropy(scores, torch.arange(scores.shape[0]))

    g = gates(
        regression(build_model=lambda p: Pair(), loss=loss, collate=lambda ex, p: {"x": tab_collate(ex, p)["x"]})
    )[0]["data"]
    c = check(g, INDEPENDENT)
    assert c["ok"] and not c.get("na") and "by 0.0e+00" in c["detail"], c  # only the scores against it moved


class Tagger(nn.Module):
    """Tokens tagged one by one; the padding mask reaches the outputs only through one faint mean over real tokens
    (``weight``), and ``cond`` is an optional per-example condition added at ``weight``."""

    def __init__(self, weight: float) -> None:
        super().__init__()
        self.emb, self.out, self.weight = nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB), weight

    def forward(
        self, ids: torch.Tensor, attention_mask: torch.Tensor, cond: torch.Tensor | None = None
    ) -> torch.Tensor:
        h = self.emb(ids)
        m = attention_mask.float()[..., None]
        pooled = (h * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
        extra = pooled if cond is None else cond.float()[:, None, None] * torch.ones_like(pooled)
        return self.out(h + self.weight * extra)


def tagging(mask_dtype: torch.dtype, cond: bool) -> Task:
    def collate(ex: list[dict[str, Any]], p: dict[str, Any]) -> dict[str, Any]:
        ids = torch.tensor([e["toks"] for e in ex])
        mask = torch.ones_like(ids, dtype=mask_dtype)
        mask[::2, -1] = 0  # every other sequence padded at its last position
        out = {"ids": ids, "attention_mask": mask}
        if cond:
            out["cond"] = torch.linspace(0.1, 0.9, len(ex))  # a continuous condition, given at a faint weight
        return out

    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        ids = batch["ids"]
        logits = model(ids, batch["attention_mask"], batch.get("cond"))
        return F.cross_entropy(logits.reshape(-1, VOCAB), torch.roll(ids, 1, 1).reshape(-1))

    return Task(
        build_model=lambda p: Tagger(1e-4), datasets=tokens, collate=collate, loss=loss, kind="other", input_key="ids"
    )


def test_a_padding_mask_that_moves_few_positions_is_read_and_a_faint_continuous_condition_is_not() -> None:
    # a mask's values are 0 and 1 at any scale: moving the outputs a little (only where it differs) is not a value
    # given below the model's range (the blind NER and multilabel families, whose masks pad little)
    for dtype in (torch.long, torch.float):
        c = check(gates(tagging(dtype, cond=False))[0]["data"], FIELDS)
        assert c["ok"] and "field 'attention_mask'" in c["detail"], (dtype, c)
    bad = check(gates(tagging(torch.long, cond=True))[0]["data"], FIELDS)
    assert not bad["ok"] and bad.get("warn") and "field 'cond'" in bad["detail"], bad
    assert "scale it cannot resolve" in bad["detail"], bad["detail"]


# --------------------------------------------------------------------------- padding invisible to the text

PADDING = "padding invisible to the text"
PAD = VOCAB - 1  # a pad id of its own


class Encoder(nn.Module):
    """One bidirectional self-attention layer over the tokens, then a mean over the sequence into a class score.
    ``mistake``: "" (the mask applied to the attention and the pooling), "inverted" (the mask's 0s taken as text),
    "pooled" (the attention masked, the mean over every position, padding included)."""

    def __init__(self, mistake: str) -> None:
        super().__init__()
        self.emb, self.v = nn.Embedding(VOCAB, 16), nn.Linear(16, 16)
        self.out, self.mistake = nn.Linear(16, 3), mistake

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        text = attention_mask.bool() if self.mistake != "inverted" else ~attention_mask.bool()
        h = self.emb(ids)
        scores = h @ h.transpose(1, 2) / 4 - 1e4 * (~text)[:, None, :].float()  # masked as BERT's extended mask
        h = torch.softmax(scores, dim=-1) @ self.v(h)
        m = torch.ones_like(text) if self.mistake == "pooled" else text
        w = m.float()[..., None]
        return self.out((h * w).sum(1) / w.sum(1).clamp(min=1))


def classify(mistake: str, left: bool = False) -> Task:
    def collate(ex: list[dict[str, Any]], p: dict[str, Any]) -> dict[str, Any]:
        ids = torch.tensor([e["toks"] for e in ex])
        mask = torch.ones_like(ids)
        for i in range(len(ex)):  # examples of 9, 7, 5 tokens: padded after their text (or before, ``left``)
            pad = 2 * (i % 3)
            if pad:
                (mask[i, :pad] if left else mask[i, -pad:]).zero_()
        ids = ids.masked_fill(mask == 0, PAD)  # padded with the pad id, as a tokenizer pads
        return {"tok": ids, "attention_mask": mask, "labels": torch.tensor([e["toks"][0] % 3 for e in ex])}

    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        return F.cross_entropy(model(batch["tok"], batch["attention_mask"]), batch["labels"])

    return Task(
        build_model=lambda p: Encoder(mistake),
        datasets=tokens,
        collate=collate,
        loss=loss,
        kind="classification",
        input_key="tok",
        label_names=["a", "b", "c"],
    )


def test_padding_the_model_masks_is_invisible_to_the_text() -> None:
    c = check(gates(classify(""))[0]["data"], PADDING)
    assert c["ok"] and not c.get("na") and "left the text's outputs" in c["detail"], c


def test_an_inverted_mask_and_a_mean_over_padding_fail_naming_what_to_check() -> None:
    for mistake in ("inverted", "pooled"):
        g = gates(classify(mistake))[0]["data"]
        c = check(g, PADDING)
        assert not c["ok"] and not c.get("warn"), (mistake, c)
        assert "more padded positions" in c["detail"] and "not inverted" in c["detail"], c["detail"]
        assert check(g, FIELDS)["ok"], mistake  # the mask is read: the check that names unread fields passes


def test_left_padding_is_measured_too_and_a_batch_without_padding_is_not_applicable() -> None:
    c = check(gates(classify("", left=True))[0]["data"], PADDING)
    assert c["ok"] and not c.get("na"), c
    bad = check(gates(classify("pooled", left=True))[0]["data"], PADDING)
    assert not bad["ok"], bad
    full = dataclasses.replace(
        classify(""),
        collate=lambda ex, p: {
            **classify("").collate(ex, p),
            "attention_mask": torch.ones(len(ex), 9, dtype=torch.long),
        },
    )
    na = check(gates(full)[0]["data"], PADDING)
    assert na.get("na") and "pad id is not known" in na["detail"], na


def test_a_mask_of_the_other_convention_is_not_judged_by_this_one() -> None:
    """1 marking padding (key_padding_mask's convention), read so by the model: the 0s cover varied text ids, so
    the check cannot tell padding from text and says so (judging it would call a healthy model broken)."""
    base = classify("inverted")  # the model takes 0 as text: right for a mask of the other convention

    def collate(ex: list[dict[str, Any]], p: dict[str, Any]) -> dict[str, Any]:
        b = base.collate(ex, p)
        return {**b, "attention_mask": 1 - b["attention_mask"]}

    c = check(gates(dataclasses.replace(base, collate=collate))[0]["data"], PADDING)
    assert c.get("na") and "key_padding_mask" in c["detail"], c


def test_a_classifier_that_pools_at_the_last_token_before_the_first_pad_id_passes() -> None:
    """Hugging Face's GPT-2 and Llama sequence classifiers find the last text token by the pad id: more padding
    keeps it where it was (other tokens at the padded positions would have moved it: a false alarm)."""

    class LastToken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.out = nn.Embedding(VOCAB, 16), nn.Linear(16, 3)

        def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            h = torch.cumsum(self.emb(ids) * attention_mask[..., None], dim=1)  # causal: tokens 0..t, masked
            last = (ids == PAD).int().argmax(-1) - 1  # the first pad, less one; -1 (the last) where none
            return self.out(h[torch.arange(ids.shape[0]), last % ids.shape[1]])

    base = classify("")

    task = dataclasses.replace(base, build_model=lambda p: LastToken())
    c = check(gates(task)[0]["data"], PADDING)
    assert c["ok"] and not c.get("na"), c


def test_token_ids_under_the_batch_key_kept_for_example_ids_are_the_users_to_rename_not_a_crash() -> None:
    """'ids' is the contract's key for the examples' ids; a tensor of token ids under it crashed the data gate
    (``batch.get("ids") or []`` on a tensor), which read as a defect of Cockpit's."""
    import dataclasses

    base = classify("")

    def collate(ex: list[dict[str, Any]], p: dict[str, Any]) -> dict[str, Any]:
        b = base.collate(ex, p)
        return {"ids": b.pop("tok"), **b}

    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        return F.cross_entropy(model(batch["ids"], batch["attention_mask"]), batch["labels"])

    task = dataclasses.replace(base, collate=collate, loss=loss, input_key="ids")
    c = check(gates(task)[0]["data"], "batch carries ids")
    assert not c["ok"] and "'ids' holds a tensor (24, 9)" in c["detail"] and "input_ids" in c["detail"], c
