"""The GPUs of this box and which run each is lent to. No torch (NVML only, through cockpit/nvml.py).

A series with ``--parallel N`` places every run on GPUs of its own
(``CUDA_VISIBLE_DEVICES``), a set of them for a DDP run; two runs share a GPU
only when the pilots' measured peaks say they fit side by side.
``COCKPIT_FAKE_GPUS`` ("4", or "4x81920" for four GPUs of 81,920 MiB) stands in
for NVML in tests on a machine without a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .nvml import NVML

MIB = 2**20


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    total: int  # bytes


def visible() -> list[Gpu]:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES respected); [] without a driver."""
    fake = os.environ.get("COCKPIT_FAKE_GPUS", "").strip()
    if fake:
        count, _, size = fake.partition("x")
        total = int(float(size or 81920) * MIB)
        return [Gpu(i, "fake GPU", total) for i in range(int(count))]
    n = NVML.device_count()  # None: no driver, no library
    out = []
    for i in range(n or 0):
        h = NVML.handle(i)
        name = NVML.name(h) if h is not None else None
        mem = NVML.memory(h) if h is not None else None
        if name is None or mem is None:
            return []  # a GPU NVML will not describe: none can be lent safely
        out.append(Gpu(i, name, mem.total))
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        keep = [int(p) for p in vis.split(",") if p.strip().isdigit()]
        if len(keep) == len([p for p in vis.split(",") if p.strip()]):
            out = [g for g in out if g.index in keep]
    return out


@dataclass
class Placement:
    """Lends GPUs to runs: at most ``per_gpu`` runs on one GPU, ``nproc`` GPUs per run."""

    gpus: list[Gpu]
    per_gpu: int = 1
    load: dict[int, int] = field(default_factory=dict)

    def assign(self, nproc: int = 1) -> list[int] | None:
        """The GPUs for the next run (least used first), or None when none are free."""
        free = sorted(
            (self.load.get(g.index, 0), g.index) for g in self.gpus if self.load.get(g.index, 0) < self.per_gpu
        )
        if len(free) < nproc:
            return None
        ids = sorted(i for _, i in free[:nproc])
        for i in ids:
            self.load[i] = self.load.get(i, 0) + 1
        return ids

    def release(self, ids: list[int]) -> None:
        for i in ids:
            self.load[i] = max(0, self.load.get(i, 0) - 1)
