"""A model of the CUDA caching allocator: what *reserved* becomes for a sequence of allocations and frees.

Stated as a model of PyTorch's ``CUDACachingAllocator`` (c10/cuda), not a copy of it:

* every block is rounded up to 512 B (``kMinBlockSize``); that rounded size is what *allocated* counts;
* requests of at most 1 MiB come from the small pool, carved out of 2 MiB segments (``kSmallBuffer``);
* larger requests under 10 MiB get a 20 MiB segment (``kLargeBuffer``) when no cached block fits; from 10 MiB up,
  the segment is the request rounded up to a multiple of 2 MiB (``kRoundLarge``);
* a cached free block is reused best-fit within its pool and split when the rest is worth keeping (small pool: any
  rest of 512 B or more; large pool: a rest over 1 MiB); freed neighbours within a segment merge again;
* segments are never returned (no ``empty_cache``), so reserved only grows: the peak reserved is the end value.

With ``expandable_segments:True`` in ``PYTORCH_CUDA_ALLOC_CONF`` (or ``PYTORCH_ALLOC_CONF``, its newer name) each
pool is one segment of virtual address space that grows: a request no free mapped block fits extends the segment's
free end (or starts past its last block) and maps physical pages up to the new end, in pages of the pool's segment
size (c10's ``find_expandable_block``: 2 MiB in the small pool, 20 MiB in the large one). Blocks inside it are
reused best-fit and split as in a fixed segment, and nothing is unmapped without ``empty_cache``: reserved is the
mapped high-water mark of each pool, rounded to its pages, instead of a sum of segments each sized for the request
that made it.

Streams, events, ``max_split_size_mb`` and garbage collection are not modelled.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

KB512 = 512
MIB = 2**20
SMALL_SIZE = MIB  # kSmallSize
SMALL_BUFFER = 2 * MIB  # kSmallBuffer
LARGE_BUFFER = 20 * MIB  # kLargeBuffer
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc
ROUND_LARGE = 2 * MIB  # kRoundLarge


def rounded(nbytes: int) -> int:
    """The block size the allocator hands out for a request (what *allocated* counts)."""
    return max(KB512, -(-nbytes // KB512) * KB512)


def segment_size(size: int) -> int:
    """The segment ``cudaMalloc`` gets when no cached block fits a (rounded) request."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def expandable_segments(env: Mapping[str, str] | None = None) -> bool:
    """Whether the allocator's configuration asks for expandable segments (the last setting of it wins)."""
    env = os.environ if env is None else env
    conf = env.get("PYTORCH_ALLOC_CONF") or env.get("PYTORCH_CUDA_ALLOC_CONF") or ""
    value = ""
    for item in conf.split(","):
        key, _, v = item.partition(":")
        if key.strip() == "expandable_segments":
            value = v.strip()
    return value == "True"


@dataclass
class _Block:
    start: int
    size: int
    free: bool
    segment: int


@dataclass
class CachingAllocator:
    """Feed it ``malloc(key, nbytes)`` and ``free(key)``; read ``allocated``, ``reserved`` and their peaks."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    segments: int = 0
    expandable: bool = False  # expandable_segments:True: one growing segment per pool, mapped in pages
    _blocks: dict[int, list[_Block]] = field(default_factory=dict)  # segment -> blocks in address order
    _small: dict[int, bool] = field(default_factory=dict)  # segment -> small pool
    _held: dict[int, _Block] = field(default_factory=dict)  # key -> block

    def malloc(self, key: int, nbytes: int) -> int:
        size = rounded(nbytes)
        small = size <= SMALL_SIZE
        block = self._best_fit(size, small)
        if block is None and self.expandable:
            block = self._grow(size, small)
        if block is None:
            seg = self.segments
            self.segments += 1
            total = segment_size(size)
            self.reserved += total
            block = _Block(0, total, True, seg)
            self._blocks[seg] = [block]
            self._small[seg] = small
        rest = block.size - size
        if rest >= (KB512 if small else SMALL_SIZE + 1):
            blocks = self._blocks[block.segment]
            at = blocks.index(block)
            blocks.insert(at + 1, _Block(block.start + size, rest, True, block.segment))
            block.size = size
        block.free = False
        self._held[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block.size

    def free(self, key: int) -> None:
        block = self._held.pop(key, None)
        if block is None:
            return
        self.allocated -= block.size
        block.free = True
        blocks = self._blocks[block.segment]
        at = blocks.index(block)
        if at + 1 < len(blocks) and blocks[at + 1].free:
            block.size += blocks.pop(at + 1).size
        if at > 0 and blocks[at - 1].free:
            prev = blocks[at - 1]
            prev.size += blocks.pop(at).size

    def _grow(self, size: int, small: bool) -> _Block:
        """The pool's expandable segment grown to fit ``size`` at its end: its free last block extended, or a new
        block past its last one, pages mapped up to the new end."""
        seg = 0 if small else 1  # one segment per pool
        if seg not in self._blocks:
            self._blocks[seg], self._small[seg] = [], small
            self.segments += 1
        blocks = self._blocks[seg]
        mapped = blocks[-1].start + blocks[-1].size if blocks else 0
        if not blocks or not blocks[-1].free:
            blocks.append(_Block(mapped, 0, True, seg))
        last = blocks[-1]
        page = SMALL_BUFFER if small else LARGE_BUFFER
        end = -(-(last.start + size) // page) * page
        self.reserved += end - mapped
        last.size = end - last.start
        return last

    def _best_fit(self, size: int, small: bool) -> _Block | None:
        best: _Block | None = None
        for seg, blocks in self._blocks.items():
            if self._small[seg] != small:
                continue
            for b in blocks:
                if b.free and b.size >= size and (best is None or b.size < best.size):
                    best = b
                    if b.size == size:
                        return b
        return best
