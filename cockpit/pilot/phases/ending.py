"""The end of each text is a target (silent errors): a causal LM that never scores its end token never learns to stop.

The classic: ``tokenizer.pad_token = tokenizer.eos_token``, then the collate (or transformers'
``DataCollatorForLanguageModeling``) sets every label equal to the pad id to the ignore index, and with it the one
real end-of-sequence token that closes each text. The loss falls, the validation loss looks healthy, the samples
read well up to their end; at inference the model runs on to ``max_new_tokens``. Nothing fails until then.

Measured on collated training rows, not declared: the token at each text's last attended position is what closes
it; where most texts close with the same token, that is the end token, and the check asks whether it is ever a
target in the texts it closes. Preconditions, each said when it does not hold: token labels laid out like the token
inputs with most supervised labels equal to an input token at t or t+1 (a causal LM's labels, shifted in the loss or
in the collate; a masked LM, a tagger or an encoder-decoder has another target stream); an attention mask that tells
the text from its padding; two texts or more, and half of them, closing with the same token.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from ... import blame
from ..context import Context
from ..datascan import collate
from ..gate import Gate

NAME = "end of text is a target"
ROWS = 16  # training examples collated for this check


def check(ctx: Context, g: Gate, encdec: bool) -> None:
    task = ctx.the_task
    if encdec:
        g.not_applicable(NAME, "an encoder-decoder: its labels are the decoder's own sequence, not the input text")
        return
    train = ctx.trainer.splits["train"]
    rows = [train[i] for i in range(min(len(train), ROWS))]
    batch = collate(task, ctx.params, rows)
    verdict, words = judge(batch, task.input_key, task.label_key, task.mask_key, task.loss_mask_key, task.ignore_index)
    if verdict == "na":
        g.not_applicable(NAME, words)
        return
    if verdict != "pass":
        words += f" (the labels are made by {blame.defined_at(task.collate)})"
    g.check(NAME, verdict == "pass", words, warn=verdict == "warn")


def judge(
    batch: dict[str, Any], input_key: str, label_key: str, mask_key: str, loss_mask_key: str | None, ignore: int
) -> tuple[str, str]:
    """("na" | "pass" | "warn" | "fail", words) for one collated batch."""
    ids, lab, mask = batch.get(input_key), batch.get(label_key), batch.get(mask_key)
    if not (torch.is_tensor(ids) and torch.is_tensor(lab)) or ids.dim() != 2 or tuple(ids.shape) != tuple(lab.shape):
        return "na", f"the labels are not laid out like {input_key!r} (token ids per position)"
    if ids.is_floating_point() or lab.is_floating_point():
        return "na", "the inputs or labels are not token ids"
    ids, lab = ids.detach().cpu(), lab.detach().cpu()
    if not torch.is_tensor(mask) or tuple(mask.shape) != tuple(ids.shape):
        return "na", f"no {mask_key!r} shaped like {input_key!r}: where each text ends is not known"
    real = mask.detach().cpu() != 0
    sup = (lab != ignore) & (lab >= 0)
    lm = batch.get(loss_mask_key) if loss_mask_key else None
    if torch.is_tensor(lm) and tuple(lm.shape) == tuple(lab.shape):
        sup &= lm.detach().cpu() != 0
    if not bool(sup.any()):
        return "na", "no supervised label in the first training rows"
    width = ids.shape[1]
    same = int((lab[sup] == ids[sup]).sum())  # labels laid out like the inputs (the loss shifts)
    ahead = int(((lab[:, : width - 1] == ids[:, 1:]) & sup[:, : width - 1]).sum())  # shifted in the collate
    n = int(sup.sum())
    if max(same, ahead) < 0.5 * n:
        return "na", (
            f"{max(same, ahead) / n:.0%} of the supervised labels are input tokens: another target stream (a masked "
            "LM, a tagger), not a text continued token by token"
        )
    shift = 1 if ahead > same else 0  # 1: the label at t names the input at t + 1 (shifted in the collate)
    last = [int(r.nonzero().max()) if bool(r.any()) else -1 for r in real]  # the text's last position
    rows = [i for i, t in enumerate(last) if t >= 0 and bool(sup[i].any())]
    if not rows:
        return "na", "no text in the first training rows has a supervised label"
    final = {i: int(sup[i].nonzero().max()) for i in rows}  # each text's last target
    # texts whose last token is no target: at its own position (shift 0) or at the one before (shift 1: the label
    # at the last position names the token after the text, which there is not, or the text was cut one short)
    tail = [i for i in rows if final[i] < last[i] - shift]
    closing = Counter(int(ids[i, last[i]]) for i in rows)
    end, count = closing.most_common(1)[0]
    token = f"token {end}" if count >= 2 and count >= 0.5 * len(rows) else "the last token"
    said = (
        f"{token} closes {count} of the {len(rows)} texts with targets (their last attended position)"
        if token != "the last token"
        else f"the {len(rows)} texts with targets"
    )
    if not tail:
        return "pass", f"{said}; the last token of each is a target" + (
            " (labels shifted in the collate: an end token cut from the inputs with its label is not seen)"
            if shift and token == "the last token"
            else ""
        )
    ends = Counter(int(lab[i, final[i]]) for i in tail)
    mark, marked = ends.most_common(1)[0]
    if marked >= 2 and marked >= 0.5 * len(tail):
        return "pass", (
            f"{said}; the targets of {marked} of the {len(tail)} that end in untrained positions end with token "
            f"{mark} (an end marker, with a template's trailing tokens or a last turn after it)"
        )
    padded = token != "the last token" and bool(((~real) & (ids == end)).any())
    if len(tail) < 0.5 * len(rows):
        return "warn", (
            f"{said}; in {len(tail)} of them the last token is no target (label {ignore}): those examples teach the "
            "model to run on past their end"
        )
    return "fail", (
        f"{said}; in {len(tail)} of them the last token is no target (label {ignore}) while the tokens before it "
        "are, so the model never learns to end a text and, at inference, generates until max_new_tokens. "
        + (
            f"The padding is {token} as well: a pad token equal to the end token (tokenizer.pad_token = "
            f"tokenizer.eos_token) with every label equal to the pad id set to {ignore} masks the end token too. "
            "Mask the padding by the attention mask (or by position), not by the token id, or pad with another id"
            if padded
            else f"Give the end of each text its label (the collate sets it to {ignore})"
        )
    )
