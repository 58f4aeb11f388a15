"""Whole-tensor reductions in bounded memory, for the checks Cockpit runs on the user's parameters and gradients.

A check such as ``torch.isfinite(p.grad).all()`` first builds a temporary as large as the tensor (one byte per
element there, sixteen for a float64 copy and its ramp): inside a measured phase that temporary is counted in the
user's peak, and on a model near the GPU's limit it is what runs out of memory. Read in chunks, a check adds at
most ``CHUNK`` elements' worth, whatever the model.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

CHUNK = 1 << 22  # elements: 4 MiB of bools, 64 MiB of a float64 copy and its ramp


def all_finite(t: torch.Tensor, chunk: int = CHUNK) -> bool:
    """Whether every element of ``t`` is finite (no NaN, no infinity), one chunk at a time."""
    flat = t.detach().reshape(-1)
    oks = [torch.isfinite(flat[i : i + chunk]).all() for i in range(0, flat.numel(), chunk)]
    return bool(torch.stack(oks).all()) if oks else True  # one synchronisation, not one per chunk


def fingerprint(
    params: Iterable[tuple[str, torch.Tensor]], chunk: int = CHUNK
) -> dict[str, tuple[float, float, float]]:
    """Three float64 sums of each parameter: plain, absolute, and weighted by position (weights in [0.5, 1.5)
    that differ for every index). Any one element that moves moves the weighted sum (a change below about
    1e-16 of the tensor's total is below float64's resolution); the plain sum alone missed elements that moved
    in opposite directions (a LayerNorm weight whose 64 elements all moved and still summed to 64.0), and the
    plain and absolute sums both missed Adam's first step, which moves every element by exactly +-lr (a weight
    norm's 8 gains in wav2vec2, as many up as down). One synchronisation per parameter."""
    out = {}
    with torch.no_grad():
        for name, p in params:
            flat = p.detach().reshape(-1)
            sums = torch.zeros(3, dtype=torch.float64, device=flat.device)
            for i in range(0, flat.numel(), chunk):
                part = flat[i : i + chunk].double()
                weight = torch.arange(i, i + part.numel(), device=part.device, dtype=torch.float64)
                weight.mul_(0.6180339887498949).frac_().add_(0.5)
                sums += torch.stack([part.sum(), part.abs().sum(), weight.mul_(part).sum()])
            s, a, w = sums.tolist()
            out[name] = (s, a, w)
    return out
