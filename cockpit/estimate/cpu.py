"""What the CPU's own kernels hold that the trace cannot see, for the CPU-semantics trace (the check beside the
estimate, and ``cockpit estimate``'s "CPU semantics" column).

A kernel's temporaries are allocated inside it, below the dispatcher, so neither the fake trace nor the counter on
a real run sees them; torch's CPU allocator does (:mod:`.measure`). One kind is large enough to move a phase's
peak: oneDNN's convolution (``aten.convolution`` on the CPU, through ``torch.backends.mkldnn``) reorders its weight,
and its input when that has 8 channels or more, into its blocked layout, writes a blocked output and copies it back
to the plain one. Measured on torch 2.13 (the [memory] events of ``profile_memory``): while the op runs it holds,
beyond its output, max(input copy + weight copy, a second output) for a convolution and two more outputs for a
transposed one; its backward (``aten.convolution_backward``) holds a blocked copy of the output's gradient and one
of the input. The CUDA side (cuDNN's workspace, through the caching allocator) and every other kernel's
temporaries are not modelled.
"""

from __future__ import annotations

from typing import Any

import torch

CONVOLUTION = torch.ops.aten.convolution.default
BACKWARD = torch.ops.aten.convolution_backward.default


def _bytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def workspace(func: Any, args: Any, kwargs: Any, out: Any) -> int:
    """The bytes ``func`` held inside its kernel beyond its output, on the CPU (0 for what is not modelled)."""
    if func not in (CONVOLUTION, BACKWARD) or not (
        torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
    ):
        return 0
    if func is BACKWARD:
        return _backward(args)
    x, w = args[0], args[1]
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.bfloat16):
        return 0
    transposed = bool(args[6]) if len(args) > 6 else bool(kwargs.get("transposed", False))
    if transposed:
        return 2 * _bytes(out)
    x_copy = _bytes(x) if x.dim() > 1 and x.shape[1] >= 8 else 0
    return max(x_copy + _bytes(w), _bytes(out))


def _backward(args: Any) -> int:
    """oneDNN's convolution backward holds a blocked copy of the output's gradient and one of the input (a layout
    of at least 16 channels where the input has fewer than 8) while it runs. Measured on torch 2.13 for 3 x 3
    convolutions of 3 to 64 channels: within 1 % of the bytes held where the weight is small beside the
    activations (a UNet's), up to 11 % under where it is as large as the input."""
    grad_out, x = args[0], args[1]
    transposed = bool(args[7]) if len(args) > 7 else False
    stride = args[4] if len(args) > 4 else [1]
    if transposed or any(int(s) != 1 for s in stride):  # measured for stride 1 only: ViT's patch convolution (stride
        return 0  # 16) holds less than this, and the model over-counted its backward by 6 %
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.bfloat16):
        return 0
    x_copy = _bytes(x) if x.dim() < 2 or x.shape[1] >= 8 else _bytes(x) // max(int(x.shape[1]), 1) * 16
    return _bytes(grad_out) + x_copy
