"""A closure-optimizer script (no Cockpit in it): LBFGS fits a small network to a smooth function, each step
re-evaluating the closure; an evaluation every 2 steps, the weights saved at the end. --defect no-zero-grad
drops the closure's optimizer.zero_grad()."""

import argparse
import os

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="lbfgs")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--defect", default="", choices=["", "no-zero-grad"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(2)
    x = torch.linspace(-2, 2, 64).unsqueeze(1)
    y = torch.sin(2 * x)
    x_val = torch.linspace(-1.9, 1.9, 16).unsqueeze(1)
    net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.LBFGS(net.parameters(), lr=0.5, max_iter=5, history_size=5)
    lines = []

    def closure() -> torch.Tensor:
        if a.defect != "no-zero-grad":
            opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        return loss

    for step in range(1, a.steps + 1):
        loss = opt.step(closure)
        lines.append(f"step {step} loss {loss.item():.6f}")
        if step % 2 == 0:
            net.eval()
            with torch.no_grad():
                lines.append(f"val {nn.functional.mse_loss(net(x_val), torch.sin(2 * x_val)).item():.6f}")
            net.train()
    torch.save(net.state_dict(), os.path.join(a.out, "net.pt"))
    with open(os.path.join(a.out, "log.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[-1], flush=True)


if __name__ == "__main__":
    main()
