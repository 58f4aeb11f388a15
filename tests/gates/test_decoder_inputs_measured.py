"""A hand-written encoder-decoder (torch.nn, teacher forcing) whose decoder input is not called
``decoder_input_ids``: the data gate finds it in the batch (the one integer tensor laid out like the labels while
the encoder input is not), so labels of the decoder's length are not a misalignment, and a decoder fed the labels
unshifted is named. (Found by the blind families: a GRU seq2seq with ``tgt_in`` failed "targets aligned with
inputs" on a healthy setup, since only the Hugging Face name or config made a model an encoder-decoder.)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.gates.test_data_measured import check, data_gate

VOCAB, BOS, EOS = 12, 1, 2


def pairs(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def ex(s: str, i: int) -> dict[str, Any]:
        src = [3 + (i + k) % 9 for k in range(4 + i % 3)]
        return {"id": f"{s}{i}", "src": src, "tgt": [3 + (x * 2) % 9 for x in src[:3]]}

    return {"train": [ex("train", i) for i in range(16)], "val": [ex("val", i) for i in range(16, 24)]}


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.enc = nn.GRU(8, 8, batch_first=True)
        self.dec = nn.GRU(8, 8, batch_first=True)
        self.out = nn.Linear(8, VOCAB)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        _, h = self.enc(self.emb(src))
        return self.out(self.dec(self.emb(tgt_in), h)[0])


def teacher_forcing(shift: bool) -> Task:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        width = max(len(e["src"]) for e in examples)
        src = torch.tensor([e["src"] + [0] * (width - len(e["src"])) for e in examples])
        labels = torch.tensor([e["tgt"] + [EOS] for e in examples])
        tgt_in = torch.cat([torch.full((len(examples), 1), BOS), labels[:, :-1]], 1) if shift else labels.clone()
        return {"input_ids": src, "attention_mask": (src != 0).long(), "tgt_in": tgt_in, "labels": labels}

    def loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        logits = model(batch["input_ids"], batch["tgt_in"])
        return F.cross_entropy(logits.reshape(-1, VOCAB), batch["labels"].reshape(-1))

    return Task(
        build_model=lambda p: Tiny(),
        datasets=pairs,
        collate=collate,
        loss=loss,
        kind="generation",
        vocab_size=lambda p: VOCAB,
    )


def test_a_torch_encoder_decoder_with_its_own_decoder_input_name_is_not_misaligned() -> None:
    g, _ = data_gate(teacher_forcing(shift=True))
    c = check(g, "targets aligned with inputs")
    assert c["ok"] and c.get("na"), c
    assert "encoder-decoder" in c["detail"]
    c = check(g, "targets aligned as declared")
    assert c["ok"], c


def test_its_decoder_fed_the_labels_unshifted_is_named() -> None:
    g, _ = data_gate(teacher_forcing(shift=False))
    c = check(g, "targets aligned as declared")
    assert not c["ok"], c
    assert "copy" in c["detail"] and "tgt_in" in c["detail"], c
