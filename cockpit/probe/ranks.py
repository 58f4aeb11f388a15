"""Whether the first update's gradients were averaged across the ranks: what data parallelism must do.

One process of a distributed script is watched (rank 0, or the one that imported torch first), and a collective
the other ranks do not also run would hang them, so the other ranks' gradients are never asked for. What one rank
can measure is its own: at the first backward, the gradient of its own loss for a few small trainable tensors
(``torch.autograd.grad`` on the graph the script's backward then uses, so DistributedDataParallel's hooks do not
fire for it); at the first step, the gradients the optimizer applied. Averaged across ranks that saw other
examples, they differ from the rank's own; bit-identical, they were not averaged: DDP's hooks were lost (the
model moved or cast after DDP wrapped it, TrainCheck's pytorch-104336), the step went through the bare module
(TrainCheck's x-jxmnop-ddp-out-of-sync), or every rank saw the same batch (which averaging cannot tell apart, and
which wastes every rank but one).

Preconditions, each a ``not applicable`` where it does not hold: a process group of more than one rank, one
microbatch in the first update (with accumulation the step applies a sum of backward calls), a backward that is
meant to synchronise (not under DDP's ``no_sync()``), and a model that plain DDP wraps or none: FSDP, ``fully_shard``
and DeepSpeed gather shards inside backward, so a backward of one rank alone would wait for the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

TENSORS = 4  # the smallest trainable tensors compared: a few thousand elements, one extra backward's worth


@dataclass
class LocalGrads:
    """The rank's own gradients for a few tensors, taken at the first backward."""

    world: int
    grads: list[tuple[str, torch.Tensor, torch.Tensor]] = field(default_factory=list)  # name, parameter, own grad
    skipped: str = ""  # why none were taken (the not-applicable reason)


def world_size() -> int:
    """The ranks of the default process group; 1 when there is none."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return 1
    try:
        return int(dist.get_world_size())
    except (RuntimeError, ValueError):
        return 1


def local_grads(
    loss: torch.Tensor, named: Sequence[tuple[str, torch.Tensor]], roots: Sequence[torch.nn.Module]
) -> LocalGrads | None:
    """This rank's own gradient of ``loss`` for the smallest trainable tensors; None without several ranks."""
    world = world_size()
    if world <= 1:
        return None
    out = LocalGrads(world)
    ddp = torch.nn.parallel.DistributedDataParallel
    other = sharded(roots)
    if other:
        out.skipped = (
            f"the model is {other}: its backward gathers shards with the other ranks, so a backward of this rank "
            "alone would wait for them"
        )
        return out
    if any(isinstance(m, ddp) and getattr(m, "static_graph", False) for m in roots):
        out.skipped = "DistributedDataParallel(static_graph=True) runs its own callbacks in the first backward"
        return out
    if any(isinstance(m, ddp) and not m.require_backward_grad_sync for m in roots):
        out.skipped = (
            "the first backward ran under DistributedDataParallel.no_sync(): its gradients stay local by design"
        )
        return out
    if loss.numel() != 1 or not loss.requires_grad:
        out.skipped = "the first backward was not of a scalar loss that requires grad"
        return out
    chosen = sorted(((n, p) for n, p in named if p.requires_grad), key=lambda x: x[1].numel())[:TENSORS]
    if not chosen:
        out.skipped = "no trainable parameter"
        return out
    try:
        grads = torch.autograd.grad(loss, [p for _, p in chosen], retain_graph=True, allow_unused=True)
    except RuntimeError as exc:
        out.skipped = f"the rank's own gradient could not be taken ({str(exc).splitlines()[0][:120]})"
        return out
    out.grads = [(n, p, g.detach().clone()) for (n, p), g in zip(chosen, grads, strict=True) if g is not None]
    if not out.grads:
        out.skipped = "the smallest trainable tensors are not in the loss's graph"
    return out


SHARDED = ("FullyShardedDataParallel", "FSDP", "DeepSpeedEngine")


def sharded(roots: Sequence[torch.nn.Module]) -> str:
    """A wrapper whose backward runs collectives of its own (FSDP, fully_shard, DeepSpeed): named, else ""."""
    for root in roots:
        for m in root.modules():
            kind = type(m).__name__
            if any(k in kind for k in SHARDED):
                return f"wrapped by {kind}"
        if any(type(p).__name__ == "DTensor" for p in root.parameters()):
            return "sharded (DTensor parameters)"
    return ""


def compared(local: LocalGrads) -> tuple[list[str], list[str]]:
    """The tensors whose applied gradient equals the rank's own (not averaged), and those that differ."""
    same: list[str] = []
    differ: list[str] = []
    for name, p, own in local.grads:
        g = p.grad
        if g is None:
            continue
        (same if g.shape == own.shape and torch.equal(g.detach(), own) else differ).append(name)
    return same, differ
