"""ATen's convolution without oneDNN holds im2col columns inside its kernel; :func:`cockpit.estimate.cpu.workspace`
models them from the shapes alone. Each case runs the real op under torch's profiler and compares the bytes it held
beyond what it returned with the model's, to the byte."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from cockpit.estimate.cpu import BACKWARD, CONVOLUTION, workspace

# name: input shape, weight shape, stride, padding, dilation, transposed, groups, dtype
CASES = {
    "3x3": ((8, 16, 32, 32), (32, 16, 3, 3), 1, 1, 1, False, 1, torch.float32),
    "3x3 few channels": ((8, 3, 32, 32), (16, 3, 3, 3), 1, 1, 1, False, 1, torch.float32),
    "1x1": ((8, 16, 32, 32), (32, 16, 1, 1), 1, 0, 1, False, 1, torch.float32),
    "1x1 padded": ((4, 16, 16, 16), (32, 16, 1, 1), 1, 1, 1, False, 1, torch.float32),
    "1x1 stride 2": ((4, 16, 16, 16), (32, 16, 1, 1), 2, 0, 1, False, 1, torch.float32),
    "3x3 stride 2": ((8, 16, 32, 32), (32, 16, 3, 3), 2, 1, 1, False, 1, torch.float32),
    "patch 16": ((2, 3, 64, 64), (32, 3, 16, 16), 16, 0, 1, False, 1, torch.float32),
    "dilated": ((4, 16, 16, 16), (32, 16, 3, 3), 1, 2, 2, False, 1, torch.float32),
    "grouped": ((4, 16, 16, 16), (32, 8, 3, 3), 1, 1, 1, False, 2, torch.float32),
    "depthwise": ((4, 16, 16, 16), (16, 1, 3, 3), 1, 1, 1, False, 16, torch.float32),
    "1-d": ((4, 16, 50), (32, 16, 3), 1, 1, 1, False, 1, torch.float32),
    "1-d stride 2": ((4, 16, 50), (32, 16, 3), 2, 1, 1, False, 1, torch.float32),
    "3-d": ((2, 4, 8, 8, 8), (8, 4, 3, 3, 3), 1, 1, 1, False, 1, torch.float32),
    "transposed": ((4, 16, 16, 16), (16, 8, 4, 4), 2, 1, 1, True, 1, torch.float32),
    "bf16": ((4, 16, 16, 16), (32, 16, 3, 3), 1, 1, 1, False, 1, torch.bfloat16),
    # a batch of 16 or more: NNPACK, where its conditions hold
    "NNPACK 3x3": ((16, 16, 16, 16), (32, 16, 3, 3), 1, 1, 1, False, 1, torch.float32),
    "NNPACK 1x1": ((16, 16, 16, 16), (32, 16, 1, 1), 1, 0, 1, False, 1, torch.float32),
    "NNPACK stride 2": ((16, 16, 16, 16), (32, 16, 3, 3), 2, 1, 1, False, 1, torch.float32),
    "padding = kernel, batch 16": ((16, 16, 16, 16), (32, 16, 3, 3), 1, 3, 1, False, 1, torch.float32),
    "dilated, batch 16": ((16, 16, 16, 16), (32, 16, 3, 3), 1, 2, 2, False, 1, torch.float32),
    "grouped, batch 16": ((16, 16, 16, 16), (32, 8, 3, 3), 1, 1, 1, False, 2, torch.float32),
    "1-d, batch 16": ((16, 16, 50), (32, 16, 3), 1, 1, 1, False, 1, torch.float32),
    "bf16, batch 16": ((16, 16, 16, 16), (32, 16, 3, 3), 1, 1, 1, False, 1, torch.bfloat16),
    "transposed, batch 16": ((16, 16, 16, 16), (16, 8, 4, 4), 2, 1, 1, True, 1, torch.float32),
}


def _held(fn: Callable[[], object]) -> int:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for e in sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns()):
        if e.name() == "[memory]":
            live += e.nbytes()
            peak = max(peak, live)
    return peak


def _bytes(*ts: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("grads", ["input and weight", "input only"])
def test_atens_convolution_columns_are_modelled_to_the_byte(name: str, grads: str) -> None:
    shape, wshape, s, p, d, transposed, groups, dtype = CASES[name]
    rank = len(shape) - 2
    x, w = torch.randn(*shape, dtype=dtype), torch.randn(*wshape, dtype=dtype)
    b = torch.randn(wshape[1] * groups if transposed else wshape[0], dtype=dtype)
    args = ([s] * rank, [p] * rank, [d] * rank, transposed, [0] * rank, groups)
    mask = [True, grads == "input and weight", grads == "input and weight"]
    with torch.backends.mkldnn.flags(enabled=False):
        out = torch.ops.aten.convolution(x, w, b, *args)
        held = _held(lambda: torch.ops.aten.convolution(x, w, b, *args))
        assert held - _bytes(out) == workspace(CONVOLUTION, (x, w, b, *args), {}, out), "forward"
        grad = torch.randn_like(out)
        back = (grad, x, w, [b.numel()], *args, mask)
        gi, gw, gb = torch.ops.aten.convolution_backward(*back)
        held = _held(lambda: torch.ops.aten.convolution_backward(*back))
        modelled = workspace(BACKWARD, back, {}, (gi, gw, gb))
        assert abs(held - _bytes(gi, gw, gb) - modelled) <= 1024, ("backward", held - _bytes(gi, gw, gb), modelled)
