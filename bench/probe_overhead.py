"""What `cockpit probe`'s hooks cost a training step: the demo loop bare vs the same loop under the probe.

One process, the demo's tinylm trained by Cockpit's own loop (as bench/overhead.py), in interleaved rounds
(bare, probed, global, bare, probed, global, ...) so machine noise hits every mode alike; medians and
their ratios are printed.

- bare:    no hook at all (torch as the script runs without the probe: nothing is installed then);
- probed:  the probe as it stays for the rest of a script it watches to the end (``to_end``), once the
           watched steps are measured: hooks on the root modules, the global optimizer step hooks, the
           patched backward, and a step event per update sent down a pipe (read by a thread here, as the
           run process reads it); the loss is read every 10th step;
- global:  the same with the global module hooks left on every submodule's call, as during the first
           watched step (why the probe moves to the roots after it).

Target: probed / bare at most 1.02.

    python bench/probe_overhead.py [--updates 20] [--rounds 7] [--device auto]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from cockpit.pilot.trainer import Trainer, resolve_device  # noqa: E402
from cockpit.probe.channel import Channel  # noqa: E402
from cockpit.probe.instrument import Instrument  # noqa: E402
from cockpit.probe.observer import Config, Observer  # noqa: E402
from cockpit.tasks import tinylm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--microbatch", type=int, default=2)
    ap.add_argument("--accumulation", type=int, default=8)
    args = ap.parse_args()
    device = resolve_device(args.device)
    params = {
        "d_model": args.d_model,
        "n_layers": 2,
        "n_heads": 4,
        "max_length": 48,
        "train_examples": 3200,
        "val_examples": 16,
        "test_examples": 16,
        "microbatch": args.microbatch,
        "accumulation": args.accumulation,
        "lr": 1e-4,
        "optimizer": "adamw",
        "grad_clip": 1.0,
        "updates": 10_000,
        "device": str(device),
    }
    tr = Trainer(tinylm.task, params, seed=0, device=device)
    tr.build()
    for _ in range(3):  # warm-up: allocator, optimizer state, kernels
        tr.update()

    rfd, wfd = os.pipe()
    sent = [0]

    def drain() -> None:
        while chunk := os.read(rfd, 1 << 16):
            sent[0] += chunk.count(b"\n")

    threading.Thread(target=drain, daemon=True).start()
    pipe = Channel(wfd)
    obs = Observer(Config(steps=2, to_end=True), pipe.send)
    inst = Instrument(obs, pipe.send)
    inst.install()
    for _ in range(3):  # the watched steps: measured once, as in a probe, then the steady state below
        tr.update()
    inst.uninstall()
    assert obs.done >= {"forward", "backward", "update_first", "update_second"}, obs.done

    def timed() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.updates):
            tr.update()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / args.updates

    def bare() -> float:
        return timed()

    def probed(local: bool = True) -> float:
        inst.install()
        if local:
            inst.go_local()
        else:
            inst.go_local = lambda: None  # type: ignore[method-assign]  # keep the hooks on every submodule
        try:
            return timed()
        finally:
            inst.uninstall()
            if not local:
                del inst.go_local

    b, p, g = [], [], []
    before = sent[0]
    for _ in range(args.rounds):
        b.append(bare())
        p.append(probed())
        g.append(probed(local=False))
    mb, mp, mg = statistics.median(b), statistics.median(p), statistics.median(g)
    n_modules = sum(1 for _ in tr.model.modules())
    print(
        f"device: {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'no GPU'}), "
        f"torch {torch.__version__}, tinylm d_model {args.d_model} ({n_modules} modules)"
    )
    print(
        f"updates per round: {args.updates} x {args.rounds} rounds, microbatch {args.microbatch} x accumulation "
        f"{args.accumulation} ({args.microbatch * args.accumulation} forward passes per update)"
    )
    print(f"bare     median {mb * 1e3:8.2f} ms/update   (rounds: {', '.join(f'{x * 1e3:.1f}' for x in b)})")
    print(f"probed   median {mp * 1e3:8.2f} ms/update   (rounds: {', '.join(f'{x * 1e3:.1f}' for x in p)})")
    print(f"global   median {mg * 1e3:8.2f} ms/update   (rounds: {', '.join(f'{x * 1e3:.1f}' for x in g)})")
    print(f"pipe: {sent[0] - before} messages sent by the probed rounds (a step event per update)")
    print(f"overhead ratio probed/bare: {mp / mb:.3f}  (target <= 1.02)")
    print(f"overhead ratio global/bare: {mg / mb:.3f}  (hooks on every submodule, the first watched step only)")


if __name__ == "__main__":
    main()
