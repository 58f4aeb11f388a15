"""Examples independent (issue 35, class 5): one example of the batch replaced by another must leave every other
example's outputs as they were (measured on the data gate's probe; see ``dependence.py``)."""

from __future__ import annotations

import torch

from ...contract import Batch
from ..context import Context
from ..gate import Gate
from ..perturb import (
    Base,
    gate_figures,
    mods_changed,
    module_of,
    others,
    out_change,
    pct,
    rows_named,
    run_once,
    scale_of,
    tolerance,
)

INDEPENDENT = "examples independent"


def _replace_row(batch: Batch, n: int, j: int, k: int) -> Batch:
    out = dict(batch)
    for key, v in batch.items():
        if torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == n:
            w = v.clone()
            w[j] = v[k]
            out[key] = w
    return out


def independent(ctx: Context, g: Gate, batch: Batch, model: torch.nn.Module, base: Base) -> None:
    task, n = ctx.the_task, base.n
    per_example = [t for t in base.first.outs if t.shape[0] == n]
    if not per_example:
        shapes = ", ".join(str(tuple(t.shape)) for t in base.first.outs[:3])
        g.not_applicable(INDEPENDENT, f"no output of the model is laid out one row per example ({shapes})")
        return
    j = n - 1
    rows = list(range(n - 1))
    k = next(
        (
            r
            for r in rows
            if any(
                torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == n and not torch.equal(v[r], v[j])
                for v in batch.values()
            )
        ),
        None,
    )
    if k is None:
        g.not_applicable(INDEPENDENT, "every example of the first batch is the same: nothing to change")
        return
    tol = tolerance(ctx, base.noise_out)
    p = run_once(ctx, model, _replace_row(batch, n, j, k), base.start, n)
    own = out_change(base.first, p, [j], n)
    leak = out_change(base.first, p, rows, n, drop=j)
    gate_figures(g)["examples"] = {"own": own, "others": leak}
    who_j = rows_named(batch, [j])
    if leak <= tol:
        g.check(
            INDEPENDENT,
            True,
            f"replacing example {who_j} changed its own outputs by {pct(own)} and the other {n - 1} examples' "
            f"by {leak:.1e} (the same pass repeated: {base.noise_out:.1e})",
        )
        return
    changed = [
        r
        for r in rows
        if any(
            float((others(x, [r], n, j).double() - others(y, [r], n, j).double()).abs().max()) / scale_of(x) > tol
            for x, y in zip(base.first.outs, p.outs, strict=False)
            if x.shape == y.shape and x.shape[0] == n and others(x, [r], n, j).numel()
        )
    ]
    mixed = mods_changed(base.first, p, tol, rows)
    where = (
        f"; the first module whose output for another example changed is {module_of(mixed[0])!r}"
        + (f" ({type(dict(model.named_modules()).get(module_of(mixed[0]), model)).__name__})" if mixed else "")
        if mixed
        else ""
    )
    declared = [f"Task.{a}" for a in ("batch_level_loss", "batch_statistics") if getattr(task, a, False)]
    router = any(
        getattr(o, "aux_loss", None) is not None or getattr(o, "router_logits", None) is not None
        for o in base.first.raw
    )
    words = (
        f"replacing only example {who_j} changed the outputs of {len(changed)} other examples of the batch "
        f"({rows_named(batch, changed)}) by up to {pct(leak)} of their scale (its own by {pct(own)}; the same pass "
        f"repeated: {base.noise_out:.1e}){where}"
    )
    ctx.findings["examples mixed"] = words
    if declared or router:
        why = " and ".join(declared) or "the router of a mixture of experts (its output names router_logits)"
        g.check(INDEPENDENT, True, f"expected, as {why} says: {words}")
        return
    g.check(
        INDEPENDENT,
        False,
        f"{words}: the model mixes the examples of a batch, so each one's prediction depends on which others "
        "share its batch (and differs between training, evaluation and deployment). Look there for a reshape or "
        "view across the batch dimension, a recurrent or attention layer fed (batch, time) where it expects "
        "(time, batch) (batch_first), statistics over dim 0 in forward, or sequences concatenated without offsets "
        "or masks; if the model is meant to use the batch, declare Task.batch_statistics = True",
    )
