"""Predictions read the context (silent errors): an output that sees one token of its text learns the label prior.

Two mistakes that train without an error. A classifier over a causal body pooled at the first position
(``last_hidden_state[:, 0]``, BERT's [CLS] position, in code moved to GPT-2 or Llama): in a decoder the first
position attends to itself only, so every text is classified by its first token. And a language model whose
attention never mixes positions (a mask that keeps the diagonal only, a sequence and batch axis swapped into the
attention): each position predicts the next token from its own, a bigram model. Both lower the loss, to the
prior's entropy or the bigram's, and stop there; the overfit gate then sees a model that cannot fit, without a cause.

Measured on the first batch in eval mode, no grad, with the user's loss (its captured logits): for a
classification task whose logits are one row per example, the text's tokens changed everywhere but at its first
position, then everywhere but at its last; logits that do not move either time read one token only. For a causal
language model (logits per position), every token before the middle position changed: the logits at that
position must move. Preconditions, each said when it does not hold: token ids (integers, one row per example) of
at least :data:`WIDTH` positions; texts of two tokens or more (by the attention mask, or the whole row without
one); not an encoder-decoder; logits laid out as above.
"""

from __future__ import annotations

import torch

from ... import blame
from ...contract import Batch
from .. import outputs
from ..context import Context
from ..gate import Gate
from ..usercode import user_int
from .semantics import encoder_decoder

NAME = "predictions read the context"
WIDTH = 4


def check(ctx: Context, g: Gate, batch: Batch) -> None:
    try:
        _check(ctx, g, batch)
    except Exception as exc:  # noqa: BLE001 - an extra measurement: what stops it is said, never a crash
        if not any(c["name"] == NAME for c in g.checks):
            g.not_applicable(NAME, f"the loss could not run on changed tokens ({type(exc).__name__}: {str(exc)[:160]})")


def _check(ctx: Context, g: Gate, batch: Batch) -> None:
    task, tr = ctx.the_task, ctx.trainer
    inp = batch.get(task.input_key)
    if not torch.is_tensor(inp) or inp.dim() != 2 or inp.is_floating_point() or inp.shape[1] < WIDTH:
        g.not_applicable(NAME, f"no token ids of {WIDTH} positions or more in {task.input_key!r}")
        return
    if encoder_decoder(tr.model, batch, task.input_key, task.label_key):
        g.not_applicable(NAME, "an encoder-decoder: its outputs read the whole input by design")
        return
    generation = task.kind == "generation" and task.causal
    if task.kind != "classification" and not generation:
        g.not_applicable(NAME, f"a {task.kind} task: neither one prediction per text nor a causal language model")
        return
    mixers = _mixers(tr.model)
    if not mixers:
        g.not_applicable(
            NAME,
            "no module of the model mixes positions (attention, a recurrent or convolutional "
            "layer): a model that reads one token by design, as a bigram baseline",
        )
        return
    mask = batch.get(task.mask_key)
    text = mask != 0 if torch.is_tensor(mask) and tuple(mask.shape) == tuple(inp.shape) else torch.ones_like(inp) > 0
    lengths = text.sum(dim=1)
    if int((lengths >= 2).sum()) < 1:
        g.not_applicable(NAME, "no text of two tokens or more in the first batch")
        return
    vocab = user_int("vocab_size", task.vocab_size, ctx.params) if task.vocab_size else int(inp.max()) + 1
    width = inp.shape[1]
    pos = torch.arange(width, device=inp.device).expand_as(inp)
    first = pos == text.int().argmax(dim=1, keepdim=True)  # each text's first position
    last = pos == (width - 1 - text.flip(1).int().argmax(dim=1, keepdim=True))  # and its last
    base = _logits(ctx, batch)
    if base is None:
        g.not_applicable(NAME, "the model returned no logits Cockpit can compare")
        return
    n = inp.shape[0]
    again = _logits(ctx, batch)
    noise = float((again - base).abs().max()) if again is not None and again.shape == base.shape else 0.0
    # what reads one token leaves the others' contributions exactly out (a causal mask's weights are exact zeros):
    # unmoved is at the floor of the same pass repeated, never a small movement (a random-init BERT's [CLS] moves
    # by 5e-5 of its logits when the rest of the text changes, and it reads it)
    tol = max(4 * noise, 1e-9 * max(1.0, float(base.abs().max())))
    if task.kind == "classification":
        if base.dim() != 2 or base.shape[0] != n:
            g.not_applicable(NAME, f"logits {tuple(base.shape)} are not one row per example")
            return
        rows = lengths >= 2
        moved = {}
        for kept, keep in (("first", first), ("last", last)):
            changed = torch.where(text & ~keep, (inp + 1) % max(vocab, 2), inp)
            other = _logits(ctx, {**batch, task.input_key: changed})
            if other is None or other.shape != base.shape:
                g.not_applicable(NAME, "the logits of a batch with other tokens are laid out otherwise")
                return
            moved[kept] = float((other - base).abs()[rows].amax())
        blind = [k for k, v in moved.items() if v <= tol]
        if not blind:
            g.check(
                NAME,
                True,
                f"changing every token but the first, then every token but the last, moved the logits of the "
                f"{int(rows.sum())} texts (by up to {moved['first']:.2g} and {moved['last']:.2g})",
            )
            return
        k = blind[0]
        g.check(
            NAME,
            False,
            f"changing every token of each text but the {k} left its logits as they were (by {moved[k]:.1e}, the "
            f"same pass repeated: {noise:.1e}; "
            f"{int(rows.sum())} texts): the prediction reads only the {k} token, so the model can learn the label "
            f"prior and nothing else{_where(ctx)}. "
            + (
                "In a causal (decoder) model the first position attends to itself only: pool the last text token "
                "(the position before the padding, as Hugging Face's sequence classifiers do) or a mean over the "
                "attention mask, not BERT's [CLS] position hidden[:, 0]"
                if k == "first"
                else "Pool over the text (a mean over the attention mask, the [CLS] position of a bidirectional "
                "encoder), or check the sequence axis the model reads"
            ),
        )
        return
    # a causal language model: the logits at the middle position must depend on the tokens before it
    t = width // 2
    rows = text[:, t] & (text[:, :t].sum(dim=1) >= 1)
    if base.dim() < 3 or base.shape[0] != n or base.shape[1] != width or not bool(rows.any()):
        g.not_applicable(NAME, "no logits per position with text before the middle position")
        return
    changed = inp.clone()
    changed[:, :t] = torch.where(text[:, :t], (inp[:, :t] + 1) % max(vocab, 2), inp[:, :t])
    other = _logits(ctx, {**batch, task.input_key: changed})
    if other is None or other.shape != base.shape:
        g.not_applicable(NAME, "the logits of a batch with other tokens are laid out otherwise")
        return
    moved_t = float((other[:, t] - base[:, t]).abs()[rows].amax())
    if moved_t > tol:
        g.check(NAME, True, f"changing every token before position {t} moved the logits at {t} (by {moved_t:.2g})")
        return
    g.check(
        NAME,
        False,
        f"changing every token before position {t} left the logits at position {t} as they were (by {moved_t:.1e}, "
        f"the same pass repeated: {noise:.1e}; "
        f"{int(rows.sum())} texts): each position predicts from its own token only, a bigram model, and the loss "
        f"stops at the bigram's{_where(ctx)}. Check the attention mask (a causal mask keeps the lower triangle, the diagonal "
        "included, not the diagonal only) and that attention runs over the sequence axis, not the batch's",
    )


MIXING = ("attention", "attn", "rnn", "lstm", "gru", "conv", "mamba", "ssm", "mixer", "transformer")


def _mixers(model: torch.nn.Module) -> list[str]:
    """The classes of the model's modules that mix positions, by type or by name."""
    found = []
    for m in model.modules():
        name = type(m).__name__
        if isinstance(m, (torch.nn.MultiheadAttention, torch.nn.RNNBase)) or any(w in name.lower() for w in MIXING):
            found.append(name)
    return found


def _where(ctx: Context) -> str:
    """The user's code that makes the logits: the model's forward and the task's loss, where they are the user's."""
    model = getattr(ctx.trainer.model, "module", ctx.trainer.model)  # under DDP, the model it wraps
    said = []
    for fn in (getattr(type(model), "forward", None), ctx.the_task.loss):
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is not None and blame.origin(code.co_filename) == "user":
            said.append(blame.defined_at(fn))
    return f" (the logits are made in {' and '.join(said)})" if said else ""


def _logits(ctx: Context, batch: Batch) -> torch.Tensor | None:
    """The logits the user's loss computes on ``batch``, in eval mode without grad (dropout off)."""
    tr = ctx.trainer
    was = tr.model.training
    tr.model.eval()
    try:
        with torch.no_grad(), outputs.capture(tr.model) as cap:
            tr.loss_call(batch, net=tr.model)
    finally:
        tr.model.train(was)
    return cap.logits.float() if torch.is_tensor(cap.logits) else None
