"""The estimate's DDP and FSDP models against DDP and FSDP run for real: two ranks under gloo on the CPU, each
measured by torch's profiler (:func:`cockpit.estimate.measure.measure`), beside the fake trace of the same rank
(issue 38).

    python -m tests.estimate.ddp_ranks [DDP|FSDP]   # prints each rank's estimated / measured peak per phase
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CHECKED = ("forward", "backward", "update_first", "update_second", "validation")
# the nanoGPT-shaped task at a size where DDP's buckets (a second copy of the gradients) move every phase
PARAMS: dict[str, Any] = dict(
    vocab=256, block=32, min_length=32, layers=2, heads=2, d=64, n_train=32, lr=1e-3, microbatch=4,
    accumulation=2, precision="fp32", fused=False,
)  # fmt: skip


def task() -> Any:
    """The nanoGPT-shaped test task (tests/estimate/gpt_task.py)."""
    sys.path.insert(0, str(HERE))
    import gpt_task

    return gpt_task.task


def _rank(rank: int, world: int, port: int, params: dict[str, Any], out: Any, strategy: str) -> None:
    import torch.distributed as dist

    from cockpit.estimate.measure import measure
    from cockpit.estimate.strategy import Strategy

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        m = measure(task(), params, strategy=Strategy(strategy, world), rank=rank)
        out.put((rank, dict(m.peaks)))
    finally:
        dist.destroy_process_group()


def measured(params: dict[str, Any], world: int = 2, strategy: str = "DDP") -> dict[int, dict[str, int]]:
    """Each rank's measured peak bytes per phase, ``strategy`` (DDP or FSDP) over ``world`` processes (spawned)
    under gloo."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, world, port, params, q, strategy)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        got = dict(q.get(timeout=300) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        raise RuntimeError(f"a {strategy} rank exited with {bad}")
    return got


def least(
    params: dict[str, Any], world: int = 2, strategy: str = "FSDP", repeats: int = 3
) -> dict[int, dict[str, int]]:
    """Each rank's least measured peak per phase over ``repeats`` runs: a free the profiler misses (gloo's worker
    lets go of a collective's tensor after its profiled scope; see :mod:`cockpit.estimate.measure`)
    only ever adds, so the least of a few runs is the rank's figure."""
    runs = [measured(params, world, strategy) for _ in range(repeats)]
    return {r: {ph: min(run[r][ph] for run in runs) for ph in runs[0][r]} for r in runs[0]}


def estimated(params: dict[str, Any], world: int = 2, strategy: str = "DDP") -> dict[int, dict[str, int]]:
    """Each rank's estimated peak bytes per phase: the fake trace under the CPU's semantics (unrounded)."""
    from cockpit.estimate.strategy import Strategy
    from cockpit.estimate.trace import run

    out = {}
    for r in range(world):
        t = run(task(), params, gpu_semantics=False, strategy=Strategy(strategy, world), rank=r)
        out[r] = {p.name: p.peak_bytes for p in t.phases}
    return out


def main() -> None:
    strategy = sys.argv[1] if len(sys.argv) > 1 else "DDP"
    real = measured(PARAMS, 2, strategy) if strategy == "DDP" else least(PARAMS, 2, strategy)
    fake, one = estimated(PARAMS, 2, strategy), estimated(PARAMS, 1, "one GPU")[0]
    for r in sorted(real):
        for ph in CHECKED:
            e, m = fake[r][ph], real[r][ph]
            print(f"rank {r} {ph:<14} one GPU {one[ph] / 2**20:8.3f}  {strategy} estimated {e / 2**20:8.3f} MiB  "
                  f"measured {m / 2**20:8.3f} MiB  ratio {e / m:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
