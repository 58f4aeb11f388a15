"""A model of the CUDA caching allocator: what *reserved* becomes for a sequence of allocations and frees.

Stated as a model of PyTorch's ``CUDACachingAllocator`` (c10/cuda), not a copy of it:

* every block is rounded up to 512 B (``kMinBlockSize``); that rounded size is what *allocated* counts;
* requests of at most 1 MiB come from the small pool, carved out of 2 MiB segments (``kSmallBuffer``);
* larger requests under 10 MiB get a 20 MiB segment (``kLargeBuffer``) when no cached block fits; from 10 MiB up,
  the segment is the request rounded up to a multiple of 2 MiB (``kRoundLarge``);
* a cached free block is reused best-fit within its pool and split when the rest is worth keeping (small pool: any
  rest of 512 B or more; large pool: a rest over 1 MiB); freed neighbours within a segment merge again;
* segments are never returned (no ``empty_cache``), so reserved only grows: the peak reserved is the end value.

Streams, events, ``max_split_size_mb``, expandable segments and garbage collection are not modelled.
"""

from __future__ import annotations

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
    _blocks: dict[int, list[_Block]] = field(default_factory=dict)  # segment -> blocks in address order
    _small: dict[int, bool] = field(default_factory=dict)  # segment -> small pool
    _held: dict[int, _Block] = field(default_factory=dict)  # key -> block

    def malloc(self, key: int, nbytes: int) -> int:
        size = rounded(nbytes)
        small = size <= SMALL_SIZE
        block = self._best_fit(size, small)
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
