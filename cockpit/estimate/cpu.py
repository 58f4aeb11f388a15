"""What the CPU's own kernels hold that the trace cannot see, for the CPU-semantics trace (the check beside the
estimate, and ``cockpit estimate``'s "CPU semantics" column).

A kernel's temporaries are allocated inside it, below the dispatcher, so neither the fake trace nor the counter on
a real run sees them; torch's CPU allocator does (:mod:`.measure`). One kind is large enough to move a phase's
peak: oneDNN's convolution (``aten.convolution`` on the CPU, through ``torch.backends.mkldnn``) reorders its weight,
and its input when that has 8 channels or more, into its blocked layout, writes a blocked output and copies it back
to the plain one. Measured on torch 2.13 (the [memory] events of ``profile_memory``): while the op runs it holds,
beyond its output, max(input copy + weight copy, a second output) for a convolution and two more outputs for a
transposed one; its backward (``aten.convolution_backward``) holds a blocked copy of the output's gradient and one
of the input. What oneDNN holds depends on the CPU and the threads, not only on the shapes (the modelled figures
were measured on an AVX-512 CPU; on a 2-core AVX2 EPYC a ResNet's backward held 1.24x of them with one thread and
1.61x with two, where oneDNN picks other kernels for 1 x 1 convolutions). With oneDNN off, ATen's own convolution
(``_slow_conv2d``, ``slow_conv3d``, ``slow_conv_transpose2d``) holds its im2col columns, whose size depends on the
shapes alone; that is modelled exactly (:func:`_columns`), and the shelf's convolution families are checked with
oneDNN off on both sides. The CUDA side (cuDNN's workspace, through the caching allocator) and every other
kernel's temporaries are not modelled.
"""

from __future__ import annotations

import math
from typing import Any

import torch

CONVOLUTION = torch.ops.aten.convolution.default
BACKWARD = torch.ops.aten.convolution_backward.default


def _bytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def workspace(func: Any, args: Any, kwargs: Any, out: Any) -> int:
    """The bytes ``func`` held inside its kernel beyond its output, on the CPU (0 for what is not modelled)."""
    if func not in (CONVOLUTION, BACKWARD):
        return 0
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return _columns(func, args, out)
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


def _columns(func: Any, args: Any, out: Any) -> int:
    """ATen's convolution without oneDNN unfolds its input into im2col columns (input channels x kernel positions x
    output positions) while it runs, for the whole batch at once; measured on torch 2.13 for every case below to the
    byte (1-d, 2-d and 3-d, strided, padded, dilated, grouped, depthwise and transposed, fp32 and bf16). A kernel of
    ones at stride 1 with no padding multiplies the input as it is and holds nothing."""
    backward = func is BACKWARD
    if backward:
        grad_out, x, w = args[0], args[1], args[2]
        stride, padding, dilation, transposed, _op, groups, mask = args[4:11]
        y = grad_out
    else:
        x, w = args[0], args[1]
        stride, padding, dilation, transposed, _op, groups = args[3:9]
        y = out
    if not all(isinstance(t, torch.Tensor) for t in (x, w, y)) or x.dim() < 3:
        return 0
    n, c, groups = int(x.shape[0]), int(x.shape[1]), int(groups)
    size = x.element_size()
    kernel, positions_out = math.prod(w.shape[2:]), math.prod(y.shape[2:])
    if transposed:  # columns of the output's channels over the input's positions: the batch's in the forward,
        one = int(w.shape[1]) * groups * kernel * math.prod(x.shape[2:]) * size  # one sample's in the backward
        plain = all(int(k) == 1 for k in w.shape[2:]) and all(int(s) == 1 for s in stride)
        return one if backward and not plain else 0 if backward else n * one
    columns = n * c * kernel * positions_out * size
    if _nnpack(x, w, padding, dilation):  # NNPACK's forward holds nothing the allocator sees; its backward
        if groups == 1:  # unfolds one sample at a time
            return columns // n if backward else 0
        # one group at a time: the forward concatenates the groups' outputs, the backward slices what it reads
        # (measured for two groups; four held 12 % more)
        return (columns // n + _bytes(x) + _bytes(y)) // groups if backward else _bytes(y)
    if all(int(k) == 1 for k in w.shape[2:]) and all(int(s) == 1 for s in stride) and not any(map(int, padding)):
        return 0
    if groups > 1 and groups == c:  # depthwise: a copy of the output
        return _bytes(y)
    input_only = backward and not mask[1]  # the input's gradient alone is a transposed product, no columns
    if groups > 1:  # one group at a time, with a contiguous slice of what it reads
        return (0 if input_only else columns // groups) + (_bytes(x) + (_bytes(y) if backward else 0)) // groups
    if input_only and x.dim() < 5 and not any(int(d) != 1 for d in dilation):
        return 0
    if any(int(d) != 1 for d in dilation) and x.dim() < 5:
        return columns // n  # dilated: one sample at a time
    return columns


def _nnpack(x: torch.Tensor, w: torch.Tensor, padding: Any, dilation: Any) -> bool:
    """ATen's choice of NNPACK for a CPU convolution (``ConvParams::use_nnpack``): fp32, 2-d, not dilated, kernels
    up to 16, padding below the kernel, and a batch of 16 or more."""
    return (
        torch._nnpack_available()
        and x.dtype == torch.float32
        and x.dim() in (3, 4)  # a 1-d convolution runs as a 2-d one
        and int(x.shape[0]) >= 16
        and all(int(d) == 1 for d in dilation)
        and all(int(k) < 17 for k in w.shape[2:])
        and all(int(p) < int(k) for p, k in zip(padding, w.shape[2:], strict=True))
    )
