"""A plain PyTorch training script, as people write one for a GPU (no Cockpit in it): a small causal transformer on
random tokens, moved to CUDA when there is one, bf16 autocast there, AdamW, an evaluation every --eval-every steps
and a checkpoint at the end. bench/gpu_check.py runs `cockpit probe` on it.

    python bench/gpu_script.py --steps 40 --out /tmp/gpu_script
"""

import argparse
import os

import torch
from torch import nn
from torch.nn import functional as F


class LM(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, block: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(block, width)
        layer = nn.TransformerEncoderLayer(
            width, width // 64, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, layers)
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        return self.head(self.norm(self.body(x, mask=mask, is_causal=True)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--out", default="out")
    a = ap.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = LM(a.vocab, a.width, a.layers, a.block).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.randint(0, a.vocab, (4096, a.block + 1))
    val = torch.randint(0, a.vocab, (256, a.block + 1))

    def loss_of(rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(rows[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, a.vocab), rows[:, 1:].reshape(-1))

    for step in range(a.steps):
        idx = torch.randint(0, len(data), (a.batch_size,))
        loss = loss_of(data[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % a.eval_every == 0:
            model.eval()
            with torch.no_grad():
                v = sum(loss_of(val[i : i + 64]).item() for i in range(0, len(val), 64)) / (len(val) // 64)
            model.train()
            print(f"step {step + 1} train {loss.item():.3f} val {v:.3f}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": a.steps}, f"{a.out}/ckpt.pt")


if __name__ == "__main__":
    main()
