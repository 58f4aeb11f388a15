"""A script shaped like nanoGPT's train.py (no Cockpit in it, nothing downloaded): a tiny causal transformer on
random tokens, gradient accumulation, an evaluation every --eval-interval iterations that ends in a checkpoint,
and --init-from resume. --defect plants one bug: no-zero-grad (the gradients are never zeroed) or eval-left-on
(estimate_loss forgets model.train())."""

import argparse
import math
import os

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(dropout)
        )
        self.heads, self.drop = heads, nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(att.transpose(1, 2).reshape(b, t, c)))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, block: int, width: int = 32, layers: int = 2, dropout: float = 0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.blocks = nn.ModuleList(Block(width, 2, dropout) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--max-iters", type=int, default=10)
    ap.add_argument("--eval-interval", type=int, default=4)
    ap.add_argument("--gradient-accumulation-steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--init-from", default="scratch", choices=["scratch", "resume"])
    ap.add_argument("--defect", default="", choices=["", "no-zero-grad", "eval-left-on"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    said: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        said.append(line + "\n")

    torch.manual_seed(1337)
    data = torch.randint(0, 48, (4000,), generator=torch.Generator().manual_seed(7))
    train, val = data[:3600], data[3600:]

    def get_batch(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        d = train if split == "train" else val
        ix = torch.randint(len(d) - a.block_size, (a.batch_size,))
        x = torch.stack([d[i : i + a.block_size] for i in ix])
        return x, torch.stack([d[i + 1 : i + 1 + a.block_size] for i in ix])

    model = TinyGPT(48, a.block_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    iter_num, best_val = 0, 1e9
    ckpt_path = os.path.join(a.out, "ckpt.pt")
    if a.init_from == "resume":
        ck = torch.load(ckpt_path, map_location="cpu")
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        iter_num, best_val = ck["iter_num"], ck["best_val_loss"]

    @torch.no_grad()
    def estimate_loss() -> dict[str, float]:
        out = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(2)
            for k in range(2):
                _, loss = model(*get_batch(split))
                losses[k] = loss.item()
            out[split] = losses.mean().item()
        if a.defect != "eval-left-on":
            model.train()
        return out

    def get_lr(it: int) -> float:
        return 1e-3 * min(1.0, (it + 1) / 3) * (0.5 * (1 + math.cos(math.pi * min(it, a.max_iters) / a.max_iters)))

    x, y = get_batch("train")
    while True:
        for group in optimizer.param_groups:
            group["lr"] = get_lr(iter_num)
        if iter_num % a.eval_interval == 0:
            losses = estimate_loss()
            say(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses["val"] < best_val or iter_num > 0:
                best_val = min(best_val, losses["val"])
                if iter_num > 0:
                    ck = {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "iter_num": iter_num,
                        "best_val_loss": best_val,
                        "config": vars(a),
                    }
                    torch.save(ck, ckpt_path)
        for _ in range(a.gradient_accumulation_steps):
            _, loss = model(x, y)
            loss = loss / a.gradient_accumulation_steps
            x, y = get_batch("train")
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if a.defect != "no-zero-grad":
            optimizer.zero_grad(set_to_none=True)
        say(f"iter {iter_num}: loss {loss.item() * a.gradient_accumulation_steps:.4f}")
        iter_num += 1
        if iter_num > a.max_iters:
            break
    with open(os.path.join(a.out, "log.txt"), "a") as log:
        log.writelines(said)


if __name__ == "__main__":
    main()
