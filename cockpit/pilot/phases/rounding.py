"""Updates larger than the weights' rounding (silent errors): bf16 or fp16 weights stepped in place lose small updates.

``model.to(torch.bfloat16)`` (or ``from_pretrained(..., torch_dtype=torch.bfloat16)``) and then a plain AdamW: the
optimizer adds each update to the bf16 weight itself, and bf16 keeps 8 significant bits, so a weight of 0.05 moves
only by steps of 2.4e-4. An update below half that spacing rounds back to the same weight. At a fine-tuning rate
(2e-5) most weights never move: the loss creeps, then stalls, and nothing fails; the same code in fp32, or under
autocast with fp32 weights, trains. Pretraining rates (1e-3) move them, which is why the mistake survives review.

Measured on the user's own weights, gradients and optimizer at the first update, never declared. Preconditions:
trainable tensors the optimizer updates in bf16 or fp16 (fp32 master weights, under autocast or kept by the
optimizer, make this *not applicable*); an optimizer whose step per weight has a known bound: the Adam family and
Lion move a weight by at most about the learning rate (the first step by exactly that), SGD by the rate times the
gradient (over 1 - momentum, plus decay). A weight is *stuck* when that bound, at the peak learning rate the
optimizer's groups name (``initial_lr``, ``max_lr`` or ``lr``), is below half its spacing in its dtype. Over a strided
sample of every such tensor (at most :data:`SAMPLE` values each, weighted by its size): a majority stuck fails,
more than :data:`WARN` warns. An optimizer that rounds stochastically or keeps a Kahan compensation passes, said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ... import blame
from ..context import Context
from ..gate import Gate

NAME = "updates survive the weights' rounding"
SAMPLE = 4096  # values of each low-precision tensor sampled
FAIL, WARN = 0.5, 0.2  # shares of the sampled weights stuck at the peak rate
MANTISSA = {torch.bfloat16: 7, torch.float16: 10}  # explicit significand bits
COMPENSATED = ("bf16_stochastic_round", "kahan_sum", "stochastic_rounding", "use_kahan_summation")


@dataclass
class Sampled:
    """What the first update's gradients said, taken before the step: per tensor, its size, weights and gradients
    at the same positions."""

    tensors: list[tuple[str, int, torch.Tensor, torch.Tensor]]  # (name, numel, weights, gradients)
    dtype: str = ""


def positions(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    idx = torch.arange(0, t.numel(), max(1, t.numel() // SAMPLE))[:SAMPLE]
    return tuple(c.to(t.device) for c in torch.unravel_index(idx, t.shape))


def sample(ctx: Context) -> Sampled | None:
    """Taken after the first update's gradients, before its step: None when no tensor the optimizer updates is in
    bf16 or fp16 (the check is then not applicable)."""
    tr = ctx.trainer
    if tr.optimizer is None:
        return None
    names = {id(p): n for n, p in tr.model.named_parameters()}
    out: list[tuple[str, int, torch.Tensor, torch.Tensor]] = []
    dtypes = set()
    for group in tr.optimizer.param_groups:
        for p in group["params"]:
            if p.dtype not in MANTISSA or not p.requires_grad or p.numel() == 0 or p.dim() == 0:
                continue
            at = positions(p)
            w = p.detach()[at].float().cpu()
            g = p.grad.detach()[at].float().cpu() if p.grad is not None else torch.zeros_like(w)
            out.append((names.get(id(p), "?"), p.numel(), w, g))
            dtypes.add(str(p.dtype).replace("torch.", ""))
    return Sampled(out, "/".join(sorted(dtypes))) if out else None


def peak_rate(group: dict[str, Any]) -> float:
    return max(float(group.get(k) or 0.0) for k in ("initial_lr", "max_lr", "lr"))


def half_spacing(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Half the distance from each weight to its neighbour in ``dtype`` (upwards in magnitude)."""
    _, exp = torch.frexp(w)  # w = m * 2**exp, 0.5 <= |m| < 1
    return torch.ldexp(torch.ones_like(w), exp - 2 - MANTISSA[dtype])


def bound(kind: str, group: dict[str, Any], w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor | None:
    """The largest step per weight the optimizer takes at its peak rate, or None when it has no such bound."""
    lr = peak_rate(group)
    if kind in ("adam", "lion"):
        return torch.full_like(w, lr)
    if kind == "sgd":
        mom = float(group.get("momentum") or 0.0)
        wd = float(group.get("weight_decay") or 0.0)
        return lr * (grad.abs() + wd * w.abs()) / max(1.0 - mom, 1e-3)
    return None


def family(optimizer: torch.optim.Optimizer) -> str:
    name = type(optimizer).__name__.lower()
    if "adam" in name:
        return "adam"
    if "lion" in name:
        return "lion"
    if name == "sgd":
        return "sgd"
    return ""


def check(ctx: Context, g: Gate, verdict: tuple[str, str]) -> None:
    """Record :func:`judge`'s verdict in the gate."""
    said, words = verdict
    if said == "na":
        g.not_applicable(NAME, words)
    else:
        g.check(NAME, said == "pass", words, warn=said == "warn")


def judge(ctx: Context, got: Sampled | None) -> tuple[str, str]:
    """("na" | "pass" | "warn" | "fail", words) for the weights :func:`sample` took."""
    tr = ctx.trainer
    if got is None:
        return "na", "every tensor the optimizer updates is fp32 (autocast computes in low precision over fp32 weights)"
    opt = tr.optimizer
    kind = family(opt)
    if not kind:
        return "na", f"{type(opt).__name__}'s step per weight has no bound Cockpit knows ({got.dtype} weights)"
    kept = [k for k in COMPENSATED if any(grp.get(k) for grp in opt.param_groups) or opt.defaults.get(k)]
    if kept:
        return "pass", (
            f"{got.dtype} weights stepped in place by {type(opt).__name__} with {kept[0]}=True: small updates are "
            "kept on average, not rounded away"
        )
    by_param = {id(p): grp for grp in opt.param_groups for p in grp["params"]}
    params = dict(tr.model.named_parameters())
    stuck = total = 0.0
    worst: list[tuple[float, str]] = []
    for name, numel, w, grad in got.tensors:
        p = params.get(name)
        grp = by_param.get(id(p)) if p is not None else None
        step = bound(kind, grp, w, grad) if grp is not None else None
        judged = (grad != 0) & (w != 0)  # a weight without a gradient in this update says nothing; 0 has no spacing
        if p is None or step is None or not bool(judged.any()):
            continue
        share = float((step < half_spacing(w, p.dtype))[judged].float().mean())
        stuck += share * numel
        total += numel
        worst.append((share, name))
    if not total:
        return "na", "no sampled low-precision weight had a gradient in the first update"
    share = stuck / total
    lr = max(peak_rate(grp) for grp in opt.param_groups)
    worst.sort(reverse=True)
    said = (
        f"{int(total):,} weights stored in {got.dtype} are stepped in place by {type(opt).__name__} at a peak "
        f"learning rate of {lr:g}: for {share:.0%} of those with a gradient one step "
        + ("(at most about the rate, for this optimizer)" if kind != "sgd" else "(the rate times the gradient)")
        + f" is below half their spacing in {got.dtype}, so it rounds back to the same weight ("
        + ", ".join(f"{n} {s:.0%}" for s, n in worst[:3])
        + ")"
    )
    if share < WARN:
        return "pass", said
    return ("warn" if share < FAIL else "fail"), (
        said + ": those weights never train, the loss stalls, and nothing fails. Keep fp32 weights (do not cast the "
        f'model in {blame.defined_at(ctx.the_task.build_model)}; precision = "bf16" in the notebook computes under '
        "autocast over fp32 weights), or use an optimizer that keeps fp32 master weights, Kahan summation or "
        "stochastic rounding (torchao's AdamW with bf16_stochastic_round=True)"
    )
