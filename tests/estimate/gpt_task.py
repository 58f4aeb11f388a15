"""A nanoGPT-shaped causal language model as a Cockpit task (sizes from [task.params]), for the estimate's tests,
its benchmark and bench/gpu_check.py: GPT-2 124M is n_layer 12, n_head 12, n_embd 768, block 1024, vocab 50304.

Random tokens of random lengths; the model follows nanoGPT's model.py (pre-LayerNorm blocks, causal
scaled_dot_product_attention, GELU MLP, tied embedding and head) and its optimizer (AdamW, decay on matrices
only, fused when asked).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from cockpit.pilot.task import Task


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU()
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, heads: int, d: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as GPT-2
        self.checkpointing = False  # activation checkpointing per block (Task.checkpointing turns it on)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def build_model(p: dict) -> nn.Module:
    return GPT(p["vocab"], p["block"], p["layers"], p["heads"], p["d"])


def datasets(p: dict) -> dict:
    g = torch.Generator().manual_seed(0)
    lo = int(p.get("min_length") or p["block"])

    def split(n: int, tag: str) -> list[dict]:
        lengths = torch.randint(lo, p["block"] + 1, (n,), generator=g).tolist()
        return [
            {"id": f"{tag}{i}", "tokens": torch.randint(0, p["vocab"], (n_ + 1,), generator=g)}
            for i, n_ in enumerate(lengths)
        ]

    return {"train": split(int(p.get("n_train") or 32), "t"), "val": split(int(p.get("n_val") or 8), "v")}


def collate(examples: list[dict], p: dict) -> dict:
    t = max(len(e["tokens"]) - 1 for e in examples)
    if p.get("sliced"):  # the collate written the common way (issue 38): two slices of one tensor, strides (T + 1, 1)
        tokens = torch.zeros(len(examples), t + 1, dtype=torch.long)  # padded with token 0 (equal lengths in use)
        for i, e in enumerate(examples):
            tokens[i, : len(e["tokens"])] = e["tokens"]
        return {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}
    x = torch.zeros(len(examples), t, dtype=torch.long)
    y = torch.full((len(examples), t), -1, dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["tokens"]) - 1
        x[i, :n], y[i, :n] = e["tokens"][:-1], e["tokens"][1:]
    return {"input_ids": x, "labels": y}


def loss(model: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return model(batch["input_ids"], batch["labels"])


def optimizer(model: nn.Module, p: dict) -> torch.optim.Optimizer:
    decay = [q for q in model.parameters() if q.requires_grad and q.dim() >= 2]
    rest = [q for q in model.parameters() if q.requires_grad and q.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    fused = bool(p.get("fused"))
    return torch.optim.AdamW(groups, lr=p["lr"], betas=(0.9, 0.95), fused=fused or None)


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="generation",
    ignore_index=-1,
    label_key="labels",
    max_length=lambda p: p["block"],
    length=lambda e: len(e["tokens"]) - 1,
    vocab_size=lambda p: p["vocab"],
    optimizer=optimizer,
    checkpointing=lambda model, on: setattr(model, "checkpointing", on),
)
