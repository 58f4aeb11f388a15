"""A GAN script with two optimizers (no Cockpit in it): a generator and a discriminator on 2-D points, the
discriminator's update then the generator's at every iteration, both saved at the end. --defect
gen-layer-left-out builds the generator's optimizer over its first layer only."""

import argparse
import os

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gan")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--defect", default="", choices=["", "gen-layer-left-out"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(5)
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    disc = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(gen[0].parameters() if a.defect else gen.parameters(), lr=2e-3, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    lines = []
    for it in range(a.iters):
        real = torch.randn(8, 2) * 0.5 + 1.0
        fake = gen(torch.randn(8, 4))
        opt_d.zero_grad()
        loss_d = bce(disc(real), torch.ones(8, 1)) + bce(disc(fake.detach()), torch.zeros(8, 1))
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        loss_g = bce(disc(fake), torch.ones(8, 1))
        loss_g.backward()
        opt_g.step()
        lines.append(f"iter {it} d {loss_d.item():.6f} g {loss_g.item():.6f}")
    torch.save({"gen": gen.state_dict(), "disc": disc.state_dict()}, os.path.join(a.out, "gan.pt"))
    with open(os.path.join(a.out, "log.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[-1], flush=True)


if __name__ == "__main__":
    main()
