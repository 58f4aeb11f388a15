"""What a rank holds beyond one GPU's figures, per strategy the selection sheet recommends (issue 38).

**DDP** (``torch.nn.parallel.DistributedDataParallel`` as the pilot's trainer wraps it: its defaults). Every rank
holds the full model, its gradients and the optimizer state, as one GPU does, and DDP's reducer adds gradient
buckets: with ``gradient_as_bucket_view=False`` (the default) a bucket is its own flat tensor, a second copy of the
gradients it holds, allocated when DDP wraps the model and kept for the run. On torch 2.13 with
``find_unused_parameters=False`` the first bucketing puts every parameter of a dtype in one bucket (the limit is
``sys.maxsize``); after the first synchronised backward the reducer rebuilds them at ``bucket_cap_mb`` (25 MiB,
the first 1 MiB) in the order gradients became ready: the bytes stay the trainable parameters' bytes, per dtype,
and the model keeps the first buckets (whether the rebuild holds old and new at once for a moment is not modelled;
in the gloo check it moved no phase's peak). Wrapping also broadcasts rank 0's parameters and buffers (``_sync_module_states``),
flattened into buckets of up to 250 MiB, a transient copy while the model is built.

**FSDP** (sharded parameters, gradients and optimizer state, and the all-gather working set) is not modelled:
:meth:`Strategy.missing` says so by name, and ``torch.compile`` is in :data:`NOT_MODELLED`, which every estimate
lists.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

BUCKET_CAP_MIB = 25  # DistributedDataParallel(bucket_cap_mb=25)
FIRST_BUCKET_MIB = 1  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BROADCAST_BUCKET = 250 * 2**20  # DDP's broadcast_bucket_size for _sync_module_states
NOT_MODELLED = "torch.compile (its fused kernels and CUDA graphs), max_split_size_mb"


@dataclass(frozen=True)
class Strategy:
    """How the campaign runs: ``one GPU``, ``DDP`` or ``FSDP`` over ``gpus`` ranks (the sheet's ``strategy_of``)."""

    name: str = "one GPU"
    gpus: int = 1

    @property
    def ddp(self) -> bool:
        return self.name == "DDP" and self.gpus > 1

    def note(self) -> str:
        """What the estimate says it modelled for DDP ("" for one GPU, and for FSDP, which it does not model)."""
        if not self.ddp:
            return ""
        return (
            f"DDP over {self.gpus} GPUs, per rank: the full model, gradients and optimizer state, plus DDP's "
            "gradient buckets (gradient_as_bucket_view=False: a second copy of the gradients, one bucket per "
            f"dtype until the reducer rebuilds them at {BUCKET_CAP_MIB} MiB) and the broadcast of rank 0's "
            "weights while it wraps the model; the all-reduce runs in place"
        )

    def missing(self) -> str:
        """What the estimate says it left out of this strategy ("" when nothing)."""
        if self.name == "FSDP":
            return (
                f"FSDP over {self.gpus} GPUs: not modelled, measure with cockpit pilot (these are one GPU's "
                "figures; FSDP shards parameters, gradients and optimizer state and adds an all-gather working set)"
            )
        return ""


def bucket_sizes(model: torch.nn.Module) -> dict[torch.dtype, int]:
    """The elements of DDP's first buckets, per dtype: every parameter that requires grad, once (a tied one once)."""
    out: dict[torch.dtype, int] = {}
    for p in model.parameters():  # parameters() yields a tied parameter once, as DDP's _build_params_for_reducer
        if p.requires_grad:
            out[p.dtype] = out.get(p.dtype, 0) + p.numel()
    return out


def wrap(model: torch.nn.Module) -> list[Any]:
    """What DDP allocates when it wraps ``model``, made in the current (fake or real) mode: the broadcast's
    flattened copies (c10d's ``broadcast_coalesced``: per dtype, buckets of up to 250 MiB, two in flight), freed as
    it goes, then the gradient buckets, returned to be held for the run."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in [*model.parameters(), *model.buffers()]:
        by_dtype.setdefault(t.dtype, []).append(t.detach())
    chunks: list[tuple[torch.dtype, int]] = []  # (dtype, elements) of each flat bucket
    for dtype, ts in by_dtype.items():
        n = size = 0
        for t in ts:
            nbytes = t.numel() * t.element_size()
            if n and size + nbytes > BROADCAST_BUCKET:
                chunks.append((dtype, n))
                n = size = 0
            n, size = n + t.numel(), size + nbytes
        if n:
            chunks.append((dtype, n))
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    in_flight: deque[torch.Tensor] = deque()
    for dtype, n in chunks:
        if len(in_flight) == 2:
            in_flight.popleft()
        in_flight.append(torch.empty(n, dtype=dtype, device=device))
    in_flight.clear()
    return [torch.empty(n, dtype=dtype, device=device) for dtype, n in bucket_sizes(model).items()]
