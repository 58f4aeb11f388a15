"""A plain PyTorch training loop with its own checkpointing and a --resume flag (no Cockpit in it).

A small classifier on synthetic data; the batch of step k is drawn from a generator seeded with k, so
a resumed run sees the same data as an uninterrupted one. AdamW with a warm-up schedule, the first
layer's bias frozen, an evaluation every --eval-every steps, a checkpoint every --save-every steps.
"""

import argparse
import os
import time

import torch
from torch import nn


def batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, 16, generator=g)
    y = (x[:, :4].sum(dim=1) > 0).long() + (x[:, 4] > 1).long()
    return x, y


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--accumulation", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=3)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--ckpt", default="checkpoint.pt")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--crash-at", type=int, default=0, help="raise at this step (a bug in the script)")
    ap.add_argument("--no-eval-mode", action="store_true", help="evaluate without model.eval() (a defect)")
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 3))
    model[0].bias.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    loss_fn = nn.CrossEntropyLoss()
    start = 0
    if args.resume and os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        start = int(state["step"])
        print(f"resumed from step {start}", flush=True)

    model.train()
    for step in range(start, args.steps):
        if args.crash_at and step + 1 == args.crash_at:
            raise ValueError(f"bad batch at step {step + 1}")
        for micro in range(args.accumulation):
            x, y = batch(step * args.accumulation + micro, args.batch)
            loss = loss_fn(model(x), y) / args.accumulation
            loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step + 1} loss {loss.item() * args.accumulation:.4f}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)
        if (step + 1) % args.eval_every == 0:
            if not args.no_eval_mode:
                model.eval()
            with torch.no_grad():
                x, y = batch(10_000, 32)
                val = loss_fn(model(x), y).item()
            model.train()
            print(f"val loss {val:.4f}", flush=True)
        if (step + 1) % args.save_every == 0:
            state = {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "rng": torch.get_rng_state(),
                "step": step + 1,
            }
            torch.save(state, args.ckpt)
    print("done", flush=True)


if __name__ == "__main__":
    main()
