"""Targets hidden from the model (issue 35, class 6): no output may read the target it is scored against (a labels
tensor fed as a feature, the target column left in the features, a decoder that sees the next token), measured
on the data gate's probe; see ``dependence.py``."""

from __future__ import annotations

from typing import Any

import torch

from ...contract import Batch
from .. import outputs
from ..context import Context
from ..gate import Gate
from ..perturb import Base, Swap, differs, out_change, pct, rows_named, run_once, scale_of, tolerance
from ..rng import set_rng_state

HIDDEN = "targets hidden from the model"
ALIGNED = "targets aligned as declared"  # the data gate's own copy check (alignment.py), which this builds on


def hidden(ctx: Context, g: Gate, batch: Batch, model: torch.nn.Module, base: Base) -> None:
    task, n = ctx.the_task, base.n
    lab = batch.get(task.label_key)
    if any(c["name"] == ALIGNED and not c["ok"] and not c.get("warn") for c in g.checks):
        g.not_applicable(HIDDEN, f"the check {ALIGNED!r} above already names the targets the model copies")
        return
    said: list[str] = []
    if torch.is_tensor(lab) and lab.dim() >= 1 and lab.shape[0] == n:
        verdict = _labels_fed(ctx, batch, model, base, lab)
        if verdict is not None:
            ok, words = verdict
            if not ok:
                g.check(HIDDEN, False, words)
                return
            said.append(words)
        copy = _target_column(ctx, batch, model, base, lab)
        if copy is not None:
            g.check(HIDDEN, False, copy)
            return
    seq = _next_token_seen(ctx, batch, model, base)
    if seq is not None:
        ok, words = seq
        if not ok:
            g.check(HIDDEN, False, words)
            return
        said.append(words)
    if not said:
        g.not_applicable(
            HIDDEN,
            "no target to change: the batch has no targets laid out one per example, and no output is scored "
            "against a token of its own input",
        )
        return
    g.check(HIDDEN, True, "; ".join(said))


def _labels_fed(
    ctx: Context, batch: Batch, model: torch.nn.Module, base: Base, lab: torch.Tensor
) -> tuple[bool, str] | None:
    """Change one target; the outputs it is scored against must stay as they were."""
    task, n = ctx.the_task, base.n
    sup = lab != task.ignore_index if not lab.is_floating_point() else torch.ones_like(lab, dtype=torch.bool)
    flat = sup.reshape(n, -1)
    r = int(flat.sum(1).argmax())
    cols = flat[r].nonzero().flatten().tolist()
    if not cols:
        return None
    seq = lab.dim() >= 2 and lab.shape[1] > 1
    t = cols[len(cols) // 2] if seq else 0
    changed = lab.clone()
    view = changed.reshape(n, -1)
    if changed.is_floating_point():
        view[r, t] = view[r, t] + 1.0 + view[r, t].abs()
    else:
        top = int(lab.max()) + 1
        view[r, t] = (view[r, t] + 1) % max(top, 2)
    p = run_once(ctx, model, {**batch, task.label_key: changed}, base.start, n)
    tol = tolerance(ctx, base.noise_out)
    shift = 1 if task.label_convention == "shift_in_loss" and seq else 0
    upto = t - shift  # the output position the target at t is scored at, and every position before it
    worst = 0.0
    for x, y in zip(base.first.outs, p.outs, strict=False):
        if x.shape != y.shape or x.shape[0] != n:
            continue
        a, b = x[r].double(), y[r].double()
        if seq and a.dim() >= 1 and a.shape[0] == lab.shape[1]:
            if upto < 0:
                continue
            a, b = a[: upto + 1], b[: upto + 1]
        worst = max(worst, float((a - b).abs().max()) / scale_of(x))
    who = rows_named(batch, [r])
    where = f"target {t} of example {who}" if seq else f"the target of example {who}"
    if worst <= tol:
        return True, f"changing {where} left the outputs it is scored against unchanged ({worst:.1e})"
    return False, (
        f"changing only {where} ({task.label_key!r}) changed the model's outputs "
        + (f"at positions up to {upto}, where it is scored, " if seq else "")
        + f"by {pct(worst)} of their scale (the same pass repeated: {base.noise_out:.1e}): the model receives its "
        f"own targets as an input, so it learns to copy them and has nothing to predict from at inference. Keep "
        f"{task.label_key!r} out of the model's inputs (only the loss may read it)"
    )


def _target_column(ctx: Context, batch: Batch, model: torch.nn.Module, base: Base, lab: torch.Tensor) -> str | None:
    """A real-valued target per example that is also a column of an input field, read by the model."""
    task, n = ctx.the_task, base.n
    if not lab.is_floating_point() or lab.reshape(n, -1).shape[1] != 1 or not differs(lab):
        return None
    y = lab.reshape(n, 1).double()
    for key, v in batch.items():
        if key == task.label_key or not torch.is_tensor(v) or not v.is_floating_point() or v.dim() < 2:
            continue
        if v.shape[0] != n:
            continue
        flat = v.reshape(n, -1).double()
        same = ((flat - y).abs() <= 1e-6 * (1 + y.abs())).all(0)
        if not bool(same.any()):
            continue
        c = int(same.nonzero()[0])
        bumped = v.clone()
        view = bumped.reshape(n, -1)
        view[:, c] = view[:, c] + 1.0 + view[:, c].abs()
        p = run_once(ctx, model, {**batch, key: bumped}, base.start, n)
        moved = out_change(base.first, p, list(range(n)), n)
        if moved <= tolerance(ctx, base.noise_out):
            continue
        return (
            f"column {c} of {key!r} equals the target {task.label_key!r} in all {n} examples of the first batch, "
            f"and the model reads it (changing that column moved the outputs by up to {pct(moved)}): "
            "the target is one of the inputs (the target column left in the features), so the model learns to "
            "copy it and the loss measures nothing it will have at inference. Drop that column from the inputs"
        )
    return None


def _next_token_seen(ctx: Context, batch: Batch, model: torch.nn.Module, base: Base) -> tuple[bool, str] | None:
    """Outputs scored against a token of the model's own input: the target of each output position is the token
    the loss's gradient there pulls hardest towards (a cross-entropy's -1 at the target); the input position
    holding that token must not change the output."""
    n = base.n
    if not base.first.calls:
        return None
    set_rng_state(base.start)
    with torch.enable_grad(), outputs.capture(model) as cap:
        lo = ctx.trainer.loss_call(batch, net=model)
    heads = [
        (i, o)
        for i, out in enumerate(cap.outputs)
        if (o := outputs.logits_of(out)) is not None and o.dim() == 3 and o.shape[0] == n and o.requires_grad
    ]
    if not heads or not lo.value.requires_grad:
        return None
    grads = torch.autograd.grad(lo.value.float().sum(), [o for _, o in heads], allow_unused=True)
    for (call, logits), gr in zip(heads, grads, strict=True):
        if gr is None or call >= len(base.first.calls):
            continue
        args, kwargs = base.first.calls[call]
        target_in = batch.get(ctx.the_task.label_key)
        given = [*args, *(v for k, v in kwargs.items() if k not in ("labels", ctx.the_task.label_key))]
        streams = [  # what the model reads, not the targets it is handed for its own loss (Hugging Face's labels)
            a for a in given if torch.is_tensor(a) and a is not target_in and a.dim() == 2 and a.shape[0] == n
        ]
        streams = [a for a in streams if not a.is_floating_point() and a.shape[1] == logits.shape[1]]
        if not streams:
            continue
        mag = gr.abs()
        weight = mag.amax(-1)  # (B, T)
        scored = weight > 1e-3 * float(weight.max())
        if int(scored.sum()) < 4:
            continue
        target = mag.argmax(-1)  # (B, T)
        for inp in streams:
            found = _relation(inp, target, scored)
            if found is None:
                continue
            d, share, count = found
            rr, pp = _first_pair(inp, target, scored, d)
            q = pp + d
            vocab = max(int(inp.max()) + 1, logits.shape[-1])
            arg = _slot_of(args, kwargs, inp)
            p = run_once(ctx, model, batch, base.start, n, swap=_swap_token(arg, call, rr, q, vocab))
            x, y = base.first.outs, p.outs
            moved = 0.0
            for a, b in zip(x, y, strict=False):
                if a.shape == b.shape and a.dim() == 3 and a.shape[:2] == logits.shape[:2]:
                    moved = max(moved, float((a[rr, pp].double() - b[rr, pp].double()).abs().max()) / scale_of(a))
            tol = tolerance(ctx, base.noise_out)
            rel = f"{share:.0%} of the {count} scored positions are scored against the input token {d} later"
            if d == 0:
                rel = f"{share:.0%} of the {count} scored positions are scored against their own input token"
            if moved <= tol:
                return True, (
                    f"{rel}, which the output there does not read (changing input {q} of example "
                    f"{rows_named(batch, [rr])} moved output {pp} by {moved:.1e})"
                )
            return False, (
                f"{rel}, and the output reads it: changing input {q} of example {rows_named(batch, [rr])} (the token "
                f"output {pp} is scored against) moved output {pp} by {pct(moved)} of its scale (the same pass "
                f"repeated: {base.noise_out:.1e}). So {share:.0%} of the loss sits on tokens the model is given: it "
                "learns to copy, not to predict. "
                + (
                    "The attention lets a position see later tokens: a causal mask missing or replaced (a 4D "
                    "padding mask built BERT-style replaces a decoder's causal mask; is_causal=False); combine "
                    "the padding mask with the causal one"
                    if d > 0
                    else "Shift the targets by one (or the inputs), or mask the positions whose input is the target"
                )
            )
    return None


def _relation(inp: torch.Tensor, target: torch.Tensor, scored: torch.Tensor) -> tuple[int, float, int] | None:
    """The input offset d at which the scored targets are input tokens (target at p == input at p + d)."""
    best: tuple[int, float, int] | None = None
    width = inp.shape[1]
    for d in (0, 1, 2):
        if d >= width:
            break
        s = scored[:, : width - d]
        count = int(s.sum())
        if count < 4:
            continue
        share = int(((target[:, : width - d] == inp[:, d:]) & s).sum()) / count
        if share >= 0.9 and (best is None or share > best[1]):
            best = (d, share, count)
    return best


def _first_pair(inp: torch.Tensor, target: torch.Tensor, scored: torch.Tensor, d: int) -> tuple[int, int]:
    width = inp.shape[1]
    hit = (target[:, : width - d] == inp[:, d:]) & scored[:, : width - d]
    rows, cols = hit.nonzero(as_tuple=True)
    mid = len(rows) // 2
    return int(rows[mid]), int(cols[mid])


def _slot_of(args: tuple[Any, ...], kwargs: dict[str, Any], t: torch.Tensor) -> int | str:
    for i, a in enumerate(args):
        if a is t:
            return i
    for k, a in kwargs.items():
        if a is t:
            return k
    return 0


def _swap_token(slot: int | str, call: int, r: int, q: int, vocab: int) -> Swap:
    def swap(args: tuple[Any, ...], kwargs: dict[str, Any], k: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if k != call:
            return args, kwargs

        def bump(t: torch.Tensor) -> torch.Tensor:
            t = t.clone()
            t[r, q] = (t[r, q] + 1) % max(vocab, 2)
            return t

        if isinstance(slot, int) and slot < len(args):
            args = (*args[:slot], bump(args[slot]), *args[slot + 1 :])
        elif isinstance(slot, str) and slot in kwargs:
            kwargs = {**kwargs, slot: bump(kwargs[slot])}
        return args, kwargs

    return swap
