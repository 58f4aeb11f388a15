"""What a CUDA GPU would do differently from the CPU the trace runs on, modelled and named.

* **Autocast's CUDA policy**, from CUDA's op lists (read from the installed torch's ``ATen/autocast_mode.h`` when it
  ships, else torch 2.13's, built in): the ops of :data:`LOWER` run in the autocast dtype, those of :data:`FP32` in
  float32, those of :data:`FP32_DTYPE` get ``dtype=float32`` when none is given (for a bfloat16 input that is a
  float32 copy, as CUDA's ``log_softmax`` makes it; a float16 input is converted inside the kernel), :data:`PROMOTE`
  ops run in their widest input type. Leaf weights are cast once per autocast region and the copies kept until it
  ends (autocast's cast cache). ``cross_entropy`` is in CPU's float32 list but in no CUDA list: on CUDA it
  decomposes into ``log_softmax`` in the input's type and ``nll_loss`` on a float32 copy, which is 1/4 less memory
  at the loss than the CPU's way (for GPT-2 124M at microbatch 8 x 1,024: 786 MiB at the peak).
* **The attention kernel** the CUDA dispatcher would pick for ``scaled_dot_product_attention`` (flash, then
  memory-efficient, then math, as enabled by ``torch.backends.cuda``): flash and memory-efficient keep O(T) memory
  (the output and its log-sum-exp; in backward the gradients and the kernel's float32 accumulators), math
  materialises the T x T scores.
* **The host and the device**: the task's collate and the model's construction run on the host; what the device
  holds is their copy (:func:`device_copy`), made as ``Tensor.to`` makes it, so a sliced batch arrives contiguous and
  the model's construction temporaries are never the device's.
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


# CUDA's autocast lists as of torch 2.13 (ATen/autocast_mode.h: AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,
# AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE), by their Python names; :func:`header_lists` reads the
# installed torch's own header instead when it ships one, so the policy follows the torch the user has.
LOWER_NAMES = (
    "linear", "matmul", "einsum", "mm", "mv", "vecdot", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "addr",
    "chain_matmul", "multi_dot", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
)  # fmt: skip
FP32_NAMES = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh",
    "tan", "pow", "softplus", "layer_norm", "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist",
    "renorm", "logsumexp", "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_bilinear2d",
    "upsample_trilinear3d", "upsample_bicubic2d", "upsample_linear1d",
)  # fmt: skip
FP32_DTYPE_NAMES = ("prod", "softmax", "log_softmax", "cumprod", "cumsum", "vector_norm", "matrix_norm", "sum")
PROMOTE_NAMES = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "grid_sample", "index_put",
    "tensordot", "scatter_add",
)  # fmt: skip
# Python spellings of an aten name that the lists do not give
ALIASES = {"matmul": ("__matmul__", "__rmatmul__"), "pow": ("__pow__", "__rpow__"), "grid_sampler": ("grid_sample",)}


def header_lists() -> dict[str, tuple[str, ...]] | None:
    """The four CUDA lists from the installed torch's ATen/autocast_mode.h, or None without the header."""
    import re
    from pathlib import Path

    path = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    try:
        text = path.read_text()
    except OSError:
        return None
    out = {}
    for key, macro in (
        ("lower", "AT_FORALL_LOWER_PRECISION_FP"),
        ("fp32", "AT_FORALL_FP32"),
        ("fp32_dtype", "AT_FORALL_FP32_SET_OPT_DTYPE"),
        ("promote", "AT_FORALL_PROMOTE"),
    ):
        m = re.search(rf"#define {macro}\(_\)(.*?)\n\s*\n", text, re.S)
        if m is None:
            return None
        names = re.findall(r"_\((\w+)", m.group(1))
        out[key] = tuple(n.removeprefix("linalg_") for n in dict.fromkeys(names) if not n.startswith("_"))
    return out


def _fns(names: tuple[str, ...]) -> frozenset[Callable[..., Any]]:
    out = set()
    for name in names:
        for spelling in (name, *ALIASES.get(name, ())):
            for owner in (torch, torch.Tensor, F, torch.linalg, torch.special):
                fn = getattr(owner, spelling, None)
                if callable(fn):
                    out.add(fn)
    return frozenset(out)


_LISTS = header_lists() or {
    "lower": LOWER_NAMES,
    "fp32": FP32_NAMES,
    "fp32_dtype": FP32_DTYPE_NAMES,
    "promote": PROMOTE_NAMES,
}
POLICY_SOURCE = "the installed torch's ATen/autocast_mode.h" if header_lists() else "torch 2.13's lists, built in"
LOWER = _fns(_LISTS["lower"])
FP32 = _fns(_LISTS["fp32"])
FP32_DTYPE = _fns(_LISTS["fp32_dtype"])
PROMOTE = _fns(_LISTS["promote"])
SOFTMAXES = _fns(("softmax", "log_softmax"))
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
        if func in SOFTMAXES and x.dtype == torch.float16:
            # CUDA's softmax/log_softmax convert a float16 input inside the kernel (half_to_float): no copy
            dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
            kernel = torch._log_softmax if "log" in getattr(func, "__name__", "") else torch._softmax
            return kernel(x, dim, True)
        return func(*args, **{**kwargs, "dtype": torch.float32})

    def _cross_entropy(self, input: torch.Tensor, target: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """cross_entropy is in no CUDA list (CPU's fp32 list has it), so it decomposes as ATen writes it:
        ``log_softmax(x, dim, dtype=x.dtype)`` in the input's type (a dtype given, so no float32), then
        ``nll_loss`` in float32 (a float32 copy of the log-probabilities, which nll_loss keeps for backward)."""
        names = ("weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
        kw = {**dict(zip(names, args, strict=False)), **kwargs}
        if not input.is_floating_point() or target.is_floating_point():  # class probabilities: cast, approximately
            return F.cross_entropy(*self._cast((input, target), torch.float32), **kw)
        smoothing = float(kw.pop("label_smoothing", 0.0) or 0.0)
        weight = self._cast(kw.pop("weight", None), torch.float32)
        dim = 1 if input.dim() > 1 else 0
        logp = torch.log_softmax(input, dim, dtype=input.dtype)
        loss = F.nll_loss(self._cast(logp, torch.float32), target, weight, **kw)
        if smoothing:
            smooth = -logp.sum(dim, dtype=torch.float32)  # sum: float32 by FP32_DTYPE, no copy
            smooth = smooth.mean() if kw.get("reduction", "mean") == "mean" else smooth
            loss = (1 - smoothing) * loss + smoothing / input.shape[dim] * smooth
        return loss

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


def device_copy(t: torch.Tensor) -> torch.Tensor:
    """A host tensor copied to the GPU as ``Tensor.to("cuda")`` holds it there: ``_to_copy`` with
    ``preserve_format`` keeps the strides of a dense, non-overlapping tensor and lays any other out afresh in the
    format ``suggest_memory_format`` names (contiguous; channels-last stays so), copying only the elements it views,
    never the rest of a larger storage (``t[:, 1:]`` of a (B, T + 1) tensor arrives as a contiguous (B, T) one).
    ``non_blocking`` changes when the copy happens, not what it holds; pinned host memory is the host's."""
    return t.to(copy=True)


def optimizer_defaults(optimizer: Any) -> list[str]:
    """Set ``foreach`` where a torch optimizer left it to the device (CUDA picks foreach); say what changed."""
    said = []
    fused = False
    for group in getattr(optimizer, "param_groups", []):
        fused = fused or bool(group.get("fused"))
        if (
            "foreach" in group
            and group["foreach"] is None
            and not group.get("fused")
            and not group.get("differentiable")
        ):
            group["foreach"] = True
            said.append(type(optimizer).__name__)
    notes = [f"{type(optimizer).__name__} fused: one kernel per step, no temporaries beyond its state"] if fused else []
    return notes + [
        f"{name} left foreach to the device: CUDA runs its foreach implementation (temporaries as large as the "
        "parameters it updates at once), so the estimate does"
        for name in sorted(set(said))
    ]
