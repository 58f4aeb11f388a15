"""Padding invisible to the text (silent errors, class 12): more padding must change no output at a position the
attention mask marks as text, and no output of the example as a whole (a pooled embedding, a class score).
Measured on the data gate's probe (see ``dependence.py``): the first batch is padded by ``EXTRA`` more positions
after its widest row, as a batch with a longer example would be (the pad id where the inputs are, 0 in the mask,
the ignore index in the targets, each other per-position field's last column again), and the text's outputs are
compared with the pass before.

What it catches that every other check passes: a mask that is read but inverted (1 marking padding, the model
attending to padding only), a mask applied to the attention but not to a mean pooling over the sequence, a
padding mask not combined with the causal one. A training run with any of these finishes; its model learns from
however much padding each batch happened to have, and predicts differently at inference, where batches pad
differently or not at all. More padding, rather than other tokens at the padded positions, keeps every padded
token the pad id: a model that finds the padding by its id (Hugging Face's sequence classifiers pool at the last
token before the first pad) sees padding where there was padding.

Preconditions, each said when it does not hold: token ids beside a 0/1 mask of the same shape, padded somewhere in
the first batch with one id at every padded position (the pad id, read there; ids that vary under the 0s are text
under a mask of the other convention, 1 marking padding); the model reads the mask (a mask it never reads is the "every input
field read" check's); room for ``EXTRA`` more positions (a model whose positions end at the batch's width says so
by raising, and the check is not applicable).
"""

from __future__ import annotations

import torch

from ...contract import Batch
from ..context import Context
from ..gate import Gate
from ..perturb import Base, gate_figures, pct, rows_named, run_once, scale_of, tolerance

PADDING = "padding invisible to the text"
EXTRA = 2  # positions of padding added after the widest row


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
        g.not_applicable(PADDING, f"the model does not read {task.mask_key!r}: its padding, if any, is its own")
        return
    text = mask != 0
    if bool(text.all()):
        g.not_applicable(PADDING, "no position of the first batch is padded: the pad id is not known")
        return
    held = ids[~text].unique()
    if held.numel() > 1:  # padding holds one id; many ids under 0s are text under a mask of the other convention
        g.not_applicable(
            PADDING,
            f"the positions {task.mask_key!r} marks 0 hold {held.numel()} different ids, not one pad id: a mask "
            "where 1 marks padding (nn.MultiheadAttention's key_padding_mask) is not measured here",
        )
        return
    pad = int(held[0])  # the pad id: what every padded position holds
    width = ids.shape[1]
    longer = _padded(batch, width, n, task.input_key, task.mask_key, task.label_key, pad, task.ignore_index)
    try:
        p = run_once(ctx, model, longer, base.start, n)
    except Exception as exc:  # no room for more positions (a model whose positions end here), or a loss that
        # cannot take a wider batch: said, not guessed
        g.not_applicable(
            PADDING,
            f"the model could not take {EXTRA} more padded positions ({type(exc).__name__}: {str(exc)[:120]})",
        )
        return
    per_row = torch.zeros(n, dtype=torch.float64)
    compared = 0
    for x, y in zip(base.first.outs, p.outs, strict=False):
        if x.dim() < 1 or y.dim() < 1 or x.shape[0] != n or y.shape[0] != n or x.numel() == 0:
            continue
        if x.dim() >= 2 and x.shape[1] == width and y.shape[1] == width + EXTRA and x.shape[2:] == y.shape[2:]:
            # one output per position: the text's positions, which the added padding follows
            d = (x.double() - y[:, :width].double()).abs() / scale_of(x)
            d = d.reshape(n, width, -1).amax(dim=2).masked_fill(~text.to(d.device), 0.0).amax(dim=1)
        elif x.dim() <= 2 and x.shape == y.shape and (x.dim() == 1 or x.shape[1] != width):
            d = ((x.double() - y.double()).abs() / scale_of(x)).reshape(n, -1).amax(dim=1)  # one per example
        else:  # attention maps, caches, anything laid out otherwise: not the predictions
            continue
        per_row = torch.maximum(per_row, d.cpu())
        compared += 1
    if not compared:
        g.not_applicable(PADDING, "no output of the model is laid out one row per example or per position")
        return
    leak = float(per_row.max())
    gate_figures(g)["padding"] = {"added": EXTRA, "pad_id": pad, "leak": leak}
    if leak <= tol:
        g.check(
            PADDING,
            True,
            f"{EXTRA} more padded positions (pad id {pad}) left the text's outputs of the {n} examples as they were "
            f"(by {leak:.1e}; the same pass repeated: {base.noise_out:.1e})",
        )
        return
    moved = [r for r in range(n) if float(per_row[r]) > tol]
    words = (
        f"{EXTRA} more padded positions (pad id {pad}, {task.mask_key!r} 0) changed the outputs of the text by up "
        f"to {pct(leak)} of their scale (examples {rows_named(batch, moved)})"
    )
    ctx.findings["padding seen"] = words
    g.check(
        PADDING,
        False,
        f"{words} (the same pass repeated: {base.noise_out:.1e}): padding reaches the predictions, so the model "
        "learns from however much padding a batch happens to have and predicts otherwise where batches pad "
        f"differently. Check that {task.mask_key!r} marks text with 1 and padding with 0 as the model expects "
        "(not inverted: nn.MultiheadAttention's key_padding_mask is the opposite of Hugging Face's "
        "attention_mask), that every pooling over the sequence (a mean, a max) leaves padded positions out, and "
        "that the padding mask is combined with the causal mask",
    )


def _padded(
    batch: Batch, width: int, n: int, ids_key: str, mask_key: str, label_key: str, pad: int, ignore: int
) -> Batch:
    """``batch`` with ``EXTRA`` more positions after its widest row in every field laid out (examples, positions)."""
    out = dict(batch)
    for key, v in batch.items():
        if not torch.is_tensor(v) or v.dim() < 2 or v.shape[0] != n or v.shape[1] != width:
            continue
        shape = (n, EXTRA, *v.shape[2:])
        if key == ids_key:
            more = torch.full(shape, pad, dtype=v.dtype, device=v.device)
        elif key == mask_key:
            more = torch.zeros(shape, dtype=v.dtype, device=v.device)
        elif key == label_key and not v.is_floating_point():
            more = torch.full(shape, ignore, dtype=v.dtype, device=v.device)
        else:  # token types, a loss mask, per-position features: the last column again
            more = v[:, -1:].expand(shape).clone()
        out[key] = torch.cat([v, more], dim=1)
    return out
