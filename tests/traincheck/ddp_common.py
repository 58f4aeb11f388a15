"""What the two DDP reproductions share: the process group, under gloo, on the CPU, this process being rank 0.

A script probed as ``cockpit probe -- python script.py`` is watched in the process that runs it, so rank 0 trains
here and the other ranks are started from it (spawned, daemonic: they end with it, as a probe that stops rank 0
needs). Not a reproduction itself: ``<id>_buggy.py`` and ``<id>_fixed.py`` import it from their own folder.
"""

import datetime
import multiprocessing
import os
import socket
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1, self.relu, self.net2 = nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


def shard(rank: int, world: int, n: int = 160) -> torch.utils.data.DataLoader:
    """This rank's share of one synthetic regression set (a DistributedSampler: each rank sees other examples)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 10, generator=g)
    y = torch.stack([x[:, :5].sum(1), x[:, 5:].sum(1), x[:, 0] * x[:, 1], x[:, 2].abs(), x[:, 3] - x[:, 4]], dim=1)
    data = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    return torch.utils.data.DataLoader(data, batch_size=10, sampler=sampler)


def _join(rank: int, world: int, port: int, body: Callable[[int, int], None]) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        body(rank, world)
    finally:
        dist.destroy_process_group()


def run(body: Callable[[int, int], None], world: int = 2) -> None:
    """Rank 0 here, ranks 1..world-1 spawned; ``body(rank, world)`` trains."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx = multiprocessing.get_context("spawn")
    others = [ctx.Process(target=_join, args=(r, world, port, body), daemon=True) for r in range(1, world)]
    for p in others:
        p.start()
    _join(0, world, port, body)
    for p in others:
        p.join(timeout=60)
