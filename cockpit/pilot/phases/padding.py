"""Padding invisible to the text (silent errors, class 12): the tokens at positions the attention mask marks as
padding must change no output at a position it marks as text, and no output of the example as a whole (a pooled
embedding, a class score). Measured on the data gate's probe (see ``dependence.py``): the padded tokens of the
first batch are replaced by other tokens, and the text's outputs compared with the pass before.

What it catches that every other check passes: a mask that is read but inverted (1 marking padding, the model
attending to padding only), a mask applied to the attention but not to a mean pooling over the sequence, a
padding mask not combined with the causal one. A training run with any of these finishes; its model learns from
however much padding each batch happened to have, and predicts differently at inference, where batches pad
differently or not at all.

Preconditions, each said when it does not hold: token ids beside a 0/1 mask of the same shape; the model reads
the mask (else its padding, if any, comes from a pad id, and changing a padded token would make text of it; a
mask the model never reads is the "every input field read" check's); examples padded after their text (right
padding), so that no position of the text moves and a causal model is never asked to ignore what precedes it.
"""

from __future__ import annotations

import torch

from ...contract import Batch
from ..context import Context
from ..gate import Gate
from ..perturb import Base, gate_figures, pct, rows_named, run_once, scale_of, tolerance
from ..trainer import user

PADDING = "padding invisible to the text"


def invisible(ctx: Context, g: Gate, batch: Batch, model: torch.nn.Module, base: Base) -> None:
    task, n = ctx.the_task, base.n
    mask, ids = batch.get(task.mask_key), batch.get(task.input_key)
    if not torch.is_tensor(mask):
        g.not_applicable(PADDING, f"the batch has no padding mask (no field {task.mask_key!r})")
        return
    if not torch.is_tensor(ids):
        g.not_applicable(PADDING, f"the batch has no token ids (no field {task.input_key!r}) beside its mask")
        return
    if ids.is_floating_point() or ids.dim() != 2 or tuple(mask.shape) != tuple(ids.shape):
        g.not_applicable(
            PADDING,
            f"{task.input_key!r} {tuple(ids.shape)} {ids.dtype} is not token ids laid out as the mask "
            f"{tuple(mask.shape)} (padded values such as zero-padded audio are part of the input)",
        )
        return
    if not bool(((mask == 0) | (mask == 1)).all()):
        g.not_applicable(PADDING, f"{task.mask_key!r} holds values other than 0 and 1: not a padding mask")
        return
    tol = tolerance(ctx, base.noise_out)
    read = gate_figures(g).get("fields", {}).get(f"field {task.mask_key!r}")
    if read is not None and read <= tol:
        g.not_applicable(
            PADDING,
            f"the model does not read {task.mask_key!r}: its padding, if any, comes from a pad id, and a padded "
            "token changed would be text to it",
        )
        return
    text = mask != 0
    width = ids.shape[1]
    at = torch.arange(width, device=ids.device).expand_as(ids)
    last_text = torch.where(text, at, -1).amax(dim=1)
    first_pad = torch.where(text, width, at).amin(dim=1)
    right = (~text).any(dim=1) & (first_pad > last_text)
    if not bool(right.any()):
        left = bool((~text).any())
        g.not_applicable(
            PADDING,
            "no example of the first batch is padded after its text"
            + (" (it pads on the left: the text's positions would depend on the padding)" if left else ""),
        )
        return
    rows = [int(r) for r in right.nonzero().flatten()]
    padded = ~text & right[:, None]
    vocab = int(user("vocab_size", task.vocab_size, ctx.params)) if task.vocab_size else int(ids.max()) + 2
    changed = ids.clone()
    changed[padded] = (ids[padded] + 1) % max(vocab, 2)
    p = run_once(ctx, model, {**batch, task.input_key: changed}, base.start, n)
    per_row = torch.zeros(n, dtype=torch.float64)
    compared = 0
    for x, y in zip(base.first.outs, p.outs, strict=False):
        if x.shape != y.shape or x.dim() < 1 or x.shape[0] != n or x.numel() == 0:
            continue
        d = (x.double() - y.double()).abs() / scale_of(x)
        if x.dim() >= 2 and x.shape[1] == width:  # one output per position: the text's positions only
            d = d.reshape(n, width, -1).amax(dim=2).masked_fill(~text, 0.0).amax(dim=1)
        else:  # one output per example
            d = d.reshape(n, -1).amax(dim=1)
        per_row = torch.maximum(per_row, d.cpu().masked_fill(~right.cpu(), 0.0))
        compared += 1
    if not compared:
        g.not_applicable(PADDING, "no output of the model is laid out one row per example")
        return
    leak = float(per_row.max())
    tokens = int(padded.sum())
    gate_figures(g)["padding"] = {"changed_tokens": tokens, "leak": leak}
    if leak <= tol:
        g.check(
            PADDING,
            True,
            f"changing the {tokens} padded tokens of {len(rows)} examples left their text's outputs as they were "
            f"(by {leak:.1e}; the same pass repeated: {base.noise_out:.1e})",
        )
        return
    moved = [r for r in rows if float(per_row[r]) > tol]
    words = (
        f"changing only the padded tokens (where {task.mask_key!r} is 0) of {len(rows)} examples changed the "
        f"outputs of their text by up to {pct(leak)} of their scale (examples {rows_named(batch, moved)})"
    )
    ctx.findings["padding seen"] = words
    g.check(
        PADDING,
        False,
        f"{words} (the same pass repeated: {base.noise_out:.1e}): padding reaches the predictions, so the model "
        "learns from however much padding a batch happens to have and predicts otherwise where batches pad "
        "differently. Check that "
        f"{task.mask_key!r} marks text with 1 and padding with 0 as the model expects (not inverted), that every "
        "pooling over the sequence (a mean, a max) leaves padded positions out, and that the padding mask is "
        "combined with the causal mask",
    )
