"""Cockpit's measurement overhead on the demo task: bare loop vs the same steps under the meters.

Both loops run the same updates of the demo's tinylm in one process, interleaved
in rounds (bare, metered, bare, metered, ...) so that machine noise hits both
alike; the ratio of medians is printed. Metered = the sampler thread at 20 Hz
(RSS, and NVML + torch counters on a GPU), a step event per update written to
an events.jsonl, and a synchronize + counters bound around every update (what a
pilot phase costs; series runs bound only phases, so this is the worst case).
Target: at most 1.02 on a GPU.

    python bench/overhead.py [--updates 20] [--rounds 5] [--device auto]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from cockpit import events as ev  # noqa: E402
from cockpit.pilot.meter import Meter  # noqa: E402
from cockpit.pilot.trainer import Trainer, resolve_device  # noqa: E402
from cockpit.tasks import tinylm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
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
    tmp = Path(tempfile.mkdtemp())
    writer = ev.EventWriter(tmp / "events.jsonl")
    meter = Meter(device, emit=writer.emit)

    def bare() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.updates):
            tr.update()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / args.updates

    def metered() -> float:
        meter._stop.clear()
        meter.start_sampler()
        t0 = time.perf_counter()
        for _ in range(args.updates):
            with meter.measure("bench") as m:
                out = tr.update()
            writer.emit(
                ev.STEP,
                step=out["step"],
                loss=out["loss"],
                lr=out["lr"],
                grad_norm=out["grad_norm"],
                examples=out["examples"],
                duration_s=m.duration_s,
                phase="bench",
                mem=m.mem,
            )
        meter.sync()
        dt = (time.perf_counter() - t0) / args.updates
        meter.stop_sampler()
        return dt

    b, m = [], []
    for _ in range(args.rounds):
        b.append(bare())
        m.append(metered())
    writer.close()
    samples = sum(1 for e in ev.read_events(tmp / "events.jsonl") if e["kind"] == ev.SAMPLE)
    mb, mm = statistics.median(b), statistics.median(m)
    print(
        f"device: {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'no GPU'}), torch {torch.__version__}"
    )
    print(
        f"updates per round: {args.updates} x {args.rounds} rounds, microbatch {args.microbatch} x accumulation {args.accumulation}"
    )
    print(f"bare     median {mb * 1e3:8.2f} ms/update   (rounds: {', '.join(f'{x * 1e3:.1f}' for x in b)})")
    print(f"metered  median {mm * 1e3:8.2f} ms/update   (rounds: {', '.join(f'{x * 1e3:.1f}' for x in m)})")
    print(f"sampler: {samples} samples written")
    print(f"overhead ratio metered/bare: {mm / mb:.3f}  (target <= 1.02 on a GPU)")


if __name__ == "__main__":
    main()
