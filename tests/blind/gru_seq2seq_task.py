"""A GRU encoder-decoder written in torch.nn, trained with teacher forcing: the encoder reads the prompt, the
decoder reads the answer shifted right behind a start token (``tgt_in``) and is scored on the answer followed by
the end of sequence (``labels``, padded with -100). Source and target have their own lengths."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.pilot.task import Task
from tests.shelf.synthetic import EOS, PAD, UNK, VOCAB, encode, pad, text_pairs

BOS = UNK  # the start token the decoder begins from (the character tokenizer has no <s> of its own)


def collate_with(shift: bool) -> Any:
    def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        src = pad([encode(e["prompt"]) for e in examples], PAD)
        tgt = [encode(e["answer"]) + [EOS] for e in examples]
        return {
            "input_ids": src,
            "attention_mask": (src != PAD).long(),
            "tgt_in": pad([[BOS] + t[:-1] if shift else t for t in tgt], PAD),
            "labels": pad(tgt, -100),
        }

    return collate


class Seq2Seq(nn.Module):
    def __init__(self, dim: int = 48) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.encoder = nn.GRU(dim, dim, batch_first=True)
        self.decoder = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        lengths = attention_mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(input_ids), lengths, batch_first=True, enforce_sorted=False)
        _, h = self.encoder(packed)
        y, _ = self.decoder(self.emb(tgt_in), h)
        return self.out(y)


def loss(model: Seq2Seq, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(batch["input_ids"], batch["attention_mask"], batch["tgt_in"])
    labels = batch["labels"]
    total = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum")
    return total, (labels != -100).sum()


def make(shift: bool = True) -> Task:
    return Task(
        build_model=lambda params: Seq2Seq(),
        datasets=text_pairs,
        collate=collate_with(shift),
        loss=loss,
        kind="generation",
        vocab_size=lambda params: VOCAB,
        group_unit="word",
    )


task = make()
