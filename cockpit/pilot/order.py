"""The order in which training sees its examples: shuffled per epoch, resumable, update by update.

One *update* takes ``microbatch x accumulation x world`` consecutive indices of
the epoch's permutation; rank ``r`` takes its own slice of each microbatch, so
shards are disjoint. With ``drop_last`` (the default), an epoch ends when fewer
examples than one whole update remain: the incomplete last *update* is dropped,
exactly as ``cockpit batch`` counts it (``updates per epoch = dataset size //
examples per update``). Without it the last update is smaller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import torch

from .task import DataTooSmall


class Position(TypedDict):
    """Where the data order is: the epoch and the cursor within it."""

    epoch: int
    cursor: int


@dataclass
class DataOrder:
    n: int
    microbatch: int
    seed: int
    drop_last: bool = True
    rank: int = 0
    world: int = 1
    epoch: int = 0
    cursor: int = 0
    accumulation: int = 1

    def _perm(self, epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def perm(self, epoch: int = 0) -> list[int]:
        return self._perm(epoch)

    @property
    def per_update(self) -> int:
        return self.microbatch * self.world * self.accumulation

    def next_update(self) -> list[list[int]]:
        """This rank's microbatches (example indices) of the next update."""
        step = self.microbatch * self.world
        need = step * self.accumulation if self.drop_last else 1
        if self.n < need:
            raise DataTooSmall(
                f"the training split has {self.n} examples, fewer than one {'update' if self.drop_last else 'example'} "
                f"({need} = microbatch {self.microbatch} x accumulation {self.accumulation} x {self.world} rank(s))"
            )
        if self.cursor >= self.n or (self.drop_last and self.n - self.cursor < step * self.accumulation):
            self.epoch += 1
            self.cursor = 0
        perm = self._perm(self.epoch)
        out: list[list[int]] = []
        for _ in range(self.accumulation):
            chunk = perm[self.cursor : self.cursor + step]
            if not chunk:
                break  # drop_last off: the epoch's last, smaller update
            self.cursor += step
            share = -(-len(chunk) // self.world)  # ceil: a short last chunk is split as evenly as it goes
            out.append(chunk[self.rank * share : (self.rank + 1) * share])
        return [mb for mb in out if mb]

    def next(self) -> list[int]:
        """One microbatch on its own (an update of one microbatch)."""
        acc, self.accumulation = self.accumulation, 1
        try:
            mbs = self.next_update()
        finally:
            self.accumulation = acc
        return mbs[0]

    def state(self) -> Position:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load(self, st: Position) -> None:
        self.epoch, self.cursor = int(st["epoch"]), int(st["cursor"])
