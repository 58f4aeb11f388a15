"""What a CUDA GPU would do differently from the CPU the trace runs on, modelled and named.

* **Autocast's CUDA policy**, from the op lists PyTorch documents for CUDA autocast (``torch.amp``): the ops of
  :data:`LOWER` run in the autocast dtype, those of :data:`FP32` in float32, those of :data:`FP32_DTYPE` get
  ``dtype=float32`` (for a bfloat16 input that is a float32 copy, as CUDA's ``log_softmax`` makes it; a float16
  input is converted inside the kernel), :data:`PROMOTE` ops run in their widest input type. Leaf weights are cast
  once per autocast region and the copies kept until it ends (autocast's cast cache).
* **The attention kernel** the CUDA dispatcher would pick for ``scaled_dot_product_attention`` (flash, then
  memory-efficient, then math, as enabled by ``torch.backends.cuda``): flash and memory-efficient keep O(T) memory
  (the output and its log-sum-exp; in backward the gradients and the kernel's float32 accumulators), math
  materialises the T x T scores.
* **Optimizer defaults**: a torch optimizer left at ``foreach=None`` runs its foreach implementation on CUDA.
* **Memory outside torch's allocator**: the CUDA context and the kernels and library state the first training step
  loads (:data:`CONTEXT_MIB`, :data:`LIBRARIES_MIB`), and cuBLAS's workspace, which torch allocates through its
  caching allocator (:data:`CUBLAS_WORKSPACE_MIB`).
"""

from __future__ import annotations

import math
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

# Measured once on an H200 with torch 2.11 (DESIGN.md, "Measured facts"): a CUDA context took 621 MiB of
# NVML-visible memory that torch's allocator never reports; after one training step NVML said 5,950 MiB used
# while torch had 4,568 MiB reserved, so 1,382 - 621 = 761 MiB more came with the kernels and libraries loaded.
CONTEXT_MIB = 621.0
LIBRARIES_MIB = 1382.0 - 621.0
# torch's default cuBLAS workspace on Hopper (CUBLAS_WORKSPACE_CONFIG ":4096:8" = 8 x 4 MiB), allocated through the
# caching allocator at the first matmul, so it is in allocated and reserved.
CUBLAS_WORKSPACE_MIB = 32.0


def _fns(*names: str) -> frozenset[Callable[..., Any]]:
    out = set()
    for name in names:
        for owner in (torch, torch.Tensor, F, torch.linalg, torch.special):
            fn = getattr(owner, name, None)
            if callable(fn):
                out.add(fn)
    return frozenset(out)


LOWER = _fns(
    "linear", "matmul", "__matmul__", "__rmatmul__", "mm", "mv", "bmm", "baddbmm", "addmm", "addbmm", "addmv",
    "addr", "einsum", "chain_matmul", "multi_dot", "vecdot", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell",
)  # fmt: skip
FP32 = _fns(
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh",
    "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "group_norm", "norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp", "vector_norm", "matrix_norm",
)  # fmt: skip
FP32_DTYPE = _fns("softmax", "log_softmax", "cumsum", "cumprod", "prod", "sum")
PROMOTE = _fns(
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample", "index_put", "scatter_add",
    "tensordot", "cat", "stack", "index_copy",
)  # fmt: skip
SDPA = frozenset({F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention})
LOW = (torch.float16, torch.bfloat16)


class CudaSemantics(TorchFunctionMode):
    """Active for the whole trace; autocast's policy applies only inside :meth:`autocast`."""

    def __init__(self) -> None:
        super().__init__()
        self.dtype: torch.dtype | None = None
        self.cache: dict[int, torch.Tensor] = {}
        self.kernels: Tally[str] = Tally()  # attention kernel -> calls
        self.autocast_calls = 0

    @contextmanager
    def autocast(self, dtype: torch.dtype) -> Iterator[None]:
        outer = self.dtype
        self.dtype = dtype
        try:
            yield
        finally:
            self.dtype = outer
            if outer is None:
                self.cache.clear()  # leaving the outermost region frees the cached weight copies

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in SDPA:
            if self.dtype is not None:
                args, kwargs = self._cast((args, kwargs), self.dtype)
            return self.attention(*args, **kwargs)
        if self.dtype is None:
            return func(*args, **kwargs)
        if func in LOWER:
            self.autocast_calls += 1
            args, kwargs = self._cast((args, kwargs), self.dtype)
        elif func in FP32:
            args, kwargs = self._cast((args, kwargs), torch.float32)
        elif func in FP32_DTYPE:
            return self._set_dtype(func, args, kwargs)
        elif func is F.cross_entropy:
            return self._cross_entropy(*args, **kwargs)
        elif func in PROMOTE:
            widest = _widest((args, kwargs))
            if widest is not None:
                args, kwargs = self._cast((args, kwargs), widest)
        return func(*args, **kwargs)

    # ---- casts

    def _cast(self, obj: Any, to: torch.dtype) -> Any:
        if isinstance(obj, torch.Tensor):
            if not obj.is_floating_point() or obj.dtype in (to, torch.float64):
                return obj
            cacheable = to in LOW and obj.dtype == torch.float32 and obj.requires_grad and obj.is_leaf
            if cacheable:
                hit = self.cache.get(id(obj))
                if hit is None:
                    hit = self.cache[id(obj)] = obj.to(to)
                return hit
            return obj.to(to)
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._cast(o, to) for o in obj)
        if isinstance(obj, dict):
            return {k: self._cast(v, to) for k, v in obj.items()}
        return obj

    def _set_dtype(self, func: Any, args: Any, kwargs: Any) -> Any:
        x = args[0] if args else kwargs.get("input")
        if not isinstance(x, torch.Tensor) or x.dtype not in LOW or kwargs.get("dtype") is not None:
            return func(*args, **kwargs)
        if func in _fns("softmax", "log_softmax") and x.dtype == torch.float16:
            # CUDA's softmax/log_softmax convert a float16 input inside the kernel (half_to_float): no copy
            dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
            kernel = torch._log_softmax if "log" in getattr(func, "__name__", "") else torch._softmax
            return kernel(x, dim, True)
        return func(*args, **{**kwargs, "dtype": torch.float32})

    def _cross_entropy(self, input: torch.Tensor, target: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """cross_entropy is log_softmax (float32 by :data:`FP32_DTYPE`) then nll_loss (float32), as it decomposes."""
        names = ("weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
        kw = {**dict(zip(names, args, strict=False)), **kwargs}
        if kw.get("label_smoothing") or not input.is_floating_point() or target.is_floating_point():
            return F.cross_entropy(*self._cast((input, target), torch.float32), **kw)
        logp = self._set_dtype(F.log_softmax, (input, 1 if input.dim() > 1 else 0), {})
        kw.pop("label_smoothing", None)
        weight = kw.pop("weight", None)
        return F.nll_loss(logp, target, self._cast(weight, torch.float32), **kw)

    # ---- attention

    def attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        kind = choose_kernel(query, key, value, attn_mask)
        self.kernels[kind] += 1
        if kind == "math":
            return _math_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        return _FusedAttention.apply(query, key, value, kind == "flash")


def _widest(obj: Any) -> torch.dtype | None:
    from torch.utils._pytree import tree_flatten

    flat, _ = tree_flatten(obj)
    dts = [t.dtype for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not dts:
        return None
    return max(dts, key=lambda d: torch.finfo(d).bits)


def choose_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> str:
    """The kernel CUDA's SDPA dispatcher would pick on a recent GPU (sm80 and later), as enabled by the flags."""
    d, dv = q.shape[-1], v.shape[-1]
    four_d = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    same = q.dtype == k.dtype == v.dtype
    if (
        torch.backends.cuda.flash_sdp_enabled()
        and four_d
        and same
        and q.dtype in LOW
        and mask is None
        and d == k.shape[-1] == dv
        and d <= 256
        and d % 8 == 0
    ):
        return "flash"
    align = 8 if q.dtype in LOW else 4
    if (
        torch.backends.cuda.mem_efficient_sdp_enabled()
        and four_d
        and same
        and q.dtype in (*LOW, torch.float32)
        and d % align == 0
        and dv % align == 0
    ):
        return "efficient"
    return "math"


class _FusedAttention(torch.autograd.Function):
    """Flash / memory-efficient attention's memory: out and log-sum-exp saved; float32 accumulators in backward."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, flash: bool) -> torch.Tensor:
        b, h, L = q.shape[0], q.shape[1], q.shape[2]
        # the kernels write (B, L, H, Dv) and hand back its transpose, so `.transpose(1, 2).contiguous()` is free
        out = q.new_empty((b, L, h, v.shape[-1])).transpose(1, 2)
        lse = q.new_empty((b, h, L if flash else math.ceil(L / 32) * 32), dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.flash = flash
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        b, h, L, d = q.shape
        grad = grad.transpose(1, 2).contiguous().transpose(1, 2)  # the kernels read a (B, L, H, D) gradient
        rows = math.ceil(L / 128) * 128 if ctx.flash else L
        delta = q.new_empty((b, h, rows), dtype=torch.float32)
        accum = q.new_empty((b, rows, h, math.ceil(d / 32) * 32), dtype=torch.float32) if ctx.flash else None
        dq = q.new_empty((b, L, h, d)).transpose(1, 2)
        dk = k.new_empty((k.shape[0], k.shape[2], k.shape[1], k.shape[3])).transpose(1, 2)
        dv = v.new_empty((v.shape[0], v.shape[2], v.shape[1], v.shape[3])).transpose(1, 2)
        del delta, accum
        return dq, dk, dv, None


def _math_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    gqa: bool,
) -> torch.Tensor:
    """What CUDA's math backend runs: scaled q and k, the (L, S) scores, softmax, dropout, times v."""
    s = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if gqa and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    scores = (q * s) @ (k * s).transpose(-2, -1)
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    attn = torch.softmax(scores, -1)
    if dropout_p > 0:
        attn = F.dropout(attn, dropout_p)
    return attn @ v


def optimizer_defaults(optimizer: Any) -> list[str]:
    """Set ``foreach`` where a torch optimizer left it to the device (CUDA picks foreach); say what changed."""
    said = []
    for group in getattr(optimizer, "param_groups", []):
        if (
            "foreach" in group
            and group["foreach"] is None
            and not group.get("fused")
            and not group.get("differentiable")
        ):
            group["foreach"] = True
            said.append(type(optimizer).__name__)
    return [
        f"{name} left foreach to the device: CUDA runs its foreach implementation (temporaries as large as the "
        "parameters it updates at once), so the estimate does"
        for name in sorted(set(said))
    ]
