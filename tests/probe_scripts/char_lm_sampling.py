"""A character-level LM script shaped like the widely used public ones (no Cockpit in it, nothing downloaded): a
tiny causal transformer with no dropout and no batch norm on a made-up text, samples printed every
--sample-every steps under torch.inference_mode() with the model left in training mode, an evaluation every
--eval-every steps that calls model.eval() (and model.train() after), a checkpoint after it. Probed unmodified,
the sampling must not be taken for an evaluation run in training mode. --defect dropout-eval-train plants the
defect the eval-mode check is for: the model has dropout and the evaluation forgets model.eval()."""

import argparse
import os

import torch
from torch import nn
from torch.nn import functional as F

TEXT = "the quick brown fox jumps over the lazy dog. a stitch in time saves nine. " * 40


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.drop = nn.Dropout(dropout) if dropout else nn.Identity()
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(att.transpose(1, 2).reshape(b, t, c)))
        return x + self.drop(self.mlp(self.ln2(x)))


class CharLM(nn.Module):
    def __init__(self, vocab: int, block: int, width: int = 32, dropout: float = 0.0):
        super().__init__()
        self.block = block
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.blocks = nn.Sequential(Block(width, 2, dropout), Block(width, 2, dropout))
        self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        logits = self.head(self.ln_f(self.blocks(x)))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.inference_mode()
    def generate(self, idx: torch.Tensor, new_tokens: int) -> torch.Tensor:
        for _ in range(new_tokens):
            logits, _ = self(idx[:, -self.block :])
            nxt = torch.multinomial(F.softmax(logits[:, -1, :], dim=-1), num_samples=1)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--sample-every", type=int, default=3)
    ap.add_argument("--eval-every", type=int, default=6)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--defect", default="", choices=["", "dropout-eval-train"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    chars = sorted(set(TEXT))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in TEXT])
    split = int(0.9 * len(data))
    torch.manual_seed(42)

    def batch(d: torch.Tensor, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(d) - a.block_size - 1, (n,))
        return torch.stack([d[i : i + a.block_size] for i in ix]), torch.stack(
            [d[i + 1 : i + 1 + a.block_size] for i in ix]
        )

    dropout = 0.2 if a.defect == "dropout-eval-train" else 0.0
    model = CharLM(len(chars), a.block_size, dropout=dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(1, a.steps + 1):
        x, y = batch(data[:split])
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % a.sample_every == 0:
            out = model.generate(torch.zeros(1, 1, dtype=torch.long), 15)
            print("sample:", "".join(chars[i] for i in out[0].tolist()), flush=True)
        if step % a.eval_every == 0:
            if a.defect != "dropout-eval-train":
                model.eval()
            with torch.inference_mode():
                losses = [model(*batch(data[split:]))[1].item() for _ in range(4)]
            model.train()
            print(f"step {step} val {sum(losses) / len(losses):.4f}", flush=True)
            torch.save({"model": model.state_dict(), "step": step}, os.path.join(a.out, "model.pt"))


if __name__ == "__main__":
    main()
