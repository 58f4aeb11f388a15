"""A plain loop that keeps an exponential moving average of its weights in a deep copy of the model, and the
best model so far in another deep copy (no Cockpit in it); the EMA model is evaluated every 3 steps and both
copies are saved whole. --defect ema-train-mode evaluates the EMA model without ema.eval()."""

import argparse
import copy
import os

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="ema")
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--defect", default="", choices=["", "ema-train-mode"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    lossf = nn.CrossEntropyLoss()
    xv, yv = torch.randn(32, 8), torch.randint(0, 3, (32,))
    best, best_loss, lines = None, float("inf"), []
    for step in range(1, a.steps + 1):
        x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
        loss = lossf(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters(), strict=True):
                pe.mul_(0.9).add_(pm, alpha=0.1)
        lines.append(f"step {step} loss {loss.item():.6f}")
        if step % 3 == 0:
            if a.defect != "ema-train-mode":
                ema.eval()
            with torch.no_grad():
                val = lossf(ema(xv), yv).item()
            lines.append(f"ema val {val:.6f}")
            if val < best_loss:
                best, best_loss = copy.deepcopy(ema), val
    torch.save(best, os.path.join(a.out, "best.pt"))
    torch.save(ema.state_dict(), os.path.join(a.out, "ema.pt"))
    with open(os.path.join(a.out, "log.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[-1], flush=True)


if __name__ == "__main__":
    main()
