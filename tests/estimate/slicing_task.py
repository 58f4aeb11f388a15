"""A small GPT-like model whose collate is written the common way (issue 38): one token tensor per batch, and
``input_ids = t[:, :-1]``, ``labels = t[:, 1:]``, two slices of it with strides (T + 1, 1), and a model whose loss
calls ``targets.view(-1)`` as nanoGPT's does. On a GPU the pilot's copy to the device makes each slice contiguous
(``Tensor.to`` keeps strides only for dense tensors); on the CPU, where the copy is none, ``view`` refuses them.

``contiguous`` in [task.params] makes the collate hand out contiguous copies itself: the batch the device holds,
which a CPU run can measure. Attention is written out (no SDPA) so that the CPU and the GPU run the same kernels
in float32 and only the batch's copy to the device differs between them.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from cockpit.pilot.task import Task


class Block(nn.Module):
    def __init__(self, d: int, heads: int, block: int):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.register_buffer("causal", torch.ones(block, block, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~self.causal[:t, :t], float("-inf")).softmax(-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, heads: int, d: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads, block) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))  # nanoGPT's view


def datasets(p: dict) -> dict:
    g = torch.Generator().manual_seed(0)

    def split(n: int, tag: str) -> list[dict]:
        return [
            {"id": f"{tag}{i}", "tokens": torch.randint(0, p["vocab"], (p["block"] + 1,), generator=g)}
            for i in range(n)
        ]

    return {"train": split(16, "t"), "val": split(8, "v")}


def collate(examples: list[dict], p: dict) -> dict:
    t = torch.stack([e["tokens"] for e in examples])  # (B, T + 1)
    x, y = t[:, :-1], t[:, 1:]  # views of t: strides (T + 1, 1), not dense
    if p.get("contiguous"):
        x, y = x.contiguous(), y.contiguous()
    return {"input_ids": x, "labels": y}


task = Task(
    build_model=lambda p: GPT(p["vocab"], p["block"], p["layers"], p["heads"], p["d"]),
    datasets=datasets,
    collate=collate,
    loss=lambda model, batch: model(batch["input_ids"], batch["labels"]),
    kind="generation",
    label_key="labels",
    length=lambda e: len(e["tokens"]) - 1,
    optimizer=lambda model, p: torch.optim.AdamW(model.parameters(), lr=p["lr"], foreach=False),
)
