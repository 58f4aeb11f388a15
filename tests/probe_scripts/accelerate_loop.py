"""A plain loop run through Hugging Face Accelerate (no Cockpit in it): accelerator.prepare wraps the model,
the optimizer and the data loader, accelerator.backward runs the backward, gradient accumulation by
accelerator.accumulate, an evaluation every 4 updates, accelerator.save of the unwrapped weights at the end.
--defect no-eval-mode evaluates without model.eval() (its dropout stays on)."""

import argparse
import os

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="acc")
    ap.add_argument("--defect", default="", choices=["", "no-eval-mode"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(6)
    x = torch.randn(96, 12)
    y = (x[:, :3].sum(1) > 0).long()
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=False)
    model, opt, loader = acc.prepare(model, opt, loader)
    lossf, lines, updates = nn.CrossEntropyLoss(), [], 0
    for xb, yb in loader:
        with acc.accumulate(model):
            loss = lossf(model(xb), yb)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
        if acc.sync_gradients:
            updates += 1
            lines.append(f"update {updates} loss {loss.item():.6f}")
            if updates % 4 == 0:
                if a.defect != "no-eval-mode":
                    model.eval()
                with torch.no_grad():
                    lines.append(f"val {lossf(model(x[:16]), y[:16]).item():.6f}")
                model.train()
    acc.save(acc.unwrap_model(model).state_dict(), os.path.join(a.out, "model.pt"))
    with open(os.path.join(a.out, "log.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[-1], flush=True)


if __name__ == "__main__":
    main()
