"""Semantic checks users would never write themselves, run inside the phases they belong to.

Each is a named check whose detail gives the ids, positions or parameters it
found. They look at the user's own code as it runs: the collate function
(deterministic; targets lined up with inputs as the task's label convention
says), the model's outputs (logits, not probabilities; a decoder that never
sees the future) and the settings a campaign declares (applied, or said to
have had no effect).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ...contract import Batch, Example
from .. import outputs
from ..context import Context
from ..datascan import batch_ids, ids_text
from ..gate import Gate
from ..usercode import user_int

LOW = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def dtypes_seen() -> Iterator[set[torch.dtype]]:
    """The floating dtypes every module's output had while active (a global forward hook)."""
    seen: set[torch.dtype] = set()

    def hook(module: Any, args: Any, out: Any) -> None:
        if torch.is_tensor(out) and out.is_floating_point():
            seen.add(out.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def settings_applied(ctx: Context, g: Gate, dtypes: set[torch.dtype]) -> None:
    """Nothing the campaign declares is a silent no-op: precision and activation checkpointing."""
    tr = ctx.trainer
    low = LOW.get(tr.precision)
    if low is not None:
        ok = low in dtypes
        g.check(
            f"precision {tr.precision} applied",
            ok,
            f"layers computed in {low} under autocast"
            if ok
            else f"no layer computed in {low} under autocast (outputs were {sorted(str(d) for d in dtypes)}): "
            f"precision = {tr.precision} had no effect on memory or time; the model casts to float32 itself "
            "or runs no autocast-eligible operation",
            warn=True,
        )
    if ctx.params.get("activation_checkpointing"):
        ok = bool(tr.checkpointing)
        g.check(
            "activation checkpointing applied",
            ok,
            f"through {tr.checkpointing}"
            if ok
            else "activation_checkpointing = true had no effect: the model has no gradient_checkpointing_enable() "
            "and the task no checkpointing(model, on); memory and time are those without it. Give Task a "
            "checkpointing hook (torch.utils.checkpoint in your blocks), or drop the setting",
            warn=True,
        )


def outputs_are_logits(ctx: Context, g: Gate, logits: torch.Tensor | None) -> None:
    """Outputs handed to a cross-entropy must be logits: probabilities mean softmax was applied twice."""
    if ctx.the_task.kind not in ("classification", "generation"):
        return  # a regression or a custom objective may output anything
    if logits is None or logits.dim() < 2 or not logits.is_floating_point() or logits.shape[-1] < 2:
        return
    x = logits.detach().float()
    sums = x.sum(-1)
    if bool((x >= 0).all()) and bool((x <= 1).all()) and bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-3)):
        g.check(
            "outputs are logits",
            False,
            f"every row of the model's output {tuple(x.shape)} sums to 1 with values in [0, 1]: these are "
            "probabilities, and a cross-entropy applies softmax again (a flat, wrong gradient). Return the "
            "logits, before softmax",
        )
        return
    lse = torch.logsumexp(x, -1)
    if bool((x <= 0).all()) and bool(torch.allclose(lse, torch.zeros_like(lse), atol=1e-3)):
        g.check(
            "outputs are logits",
            False,
            f"the model's output {tuple(x.shape)} is log-probabilities (log_softmax): right for nll_loss, "
            "harmless for cross_entropy, wrong for anything that expects logits (label smoothing, "
            "distillation); check that the loss matches",
            warn=True,
        )
        return
    g.check("outputs are logits", True, f"output {tuple(x.shape)}: unnormalised scores, as a cross-entropy expects")


def causal_mask(ctx: Context, g: Gate, batch: Batch) -> None:
    """Decoder LMs: tokens after position t never change the outputs at positions up to t."""
    task, tr = ctx.the_task, ctx.trainer
    if task.kind != "generation" or not task.causal or encoder_decoder(tr.model, batch, task.input_key, task.label_key):
        return
    inp = batch.get(task.input_key)
    if not torch.is_tensor(inp) or inp.dim() != 2 or inp.is_floating_point() or inp.shape[1] < 4:
        return
    width = inp.shape[1]
    t = width // 2
    vocab = user_int("vocab_size", task.vocab_size, ctx.params) if task.vocab_size else int(inp.max()) + 1
    changed = inp.clone()
    changed[:, t + 1 :] = (inp[:, t + 1 :] + 1) % max(vocab, 2)
    was = tr.model.training
    tr.model.eval()  # dropout off: the two passes may differ only through the changed tokens
    try:
        with torch.no_grad():
            with outputs.capture(tr.model) as a:
                tr.loss_call(batch, net=tr.model)
            with outputs.capture(tr.model) as b:
                tr.loss_call({**batch, task.input_key: changed}, net=tr.model)
    finally:
        tr.model.train(was)
    la, lb = a.logits, b.logits
    if la is None or lb is None or la.shape != lb.shape or la.dim() < 3 or la.shape[1] != width:
        return
    before_a, before_b = la[:, : t + 1].float(), lb[:, : t + 1].float()
    tol = (1e-2 if tr.precision != "fp32" else 1e-4) * max(1.0, float(before_a.abs().max()))
    diff = (before_a - before_b).abs().amax(dim=-1)  # [B, t + 1]
    bad = diff > tol
    if not bool(bad.any()):
        g.check(
            "causal mask",
            True,
            f"changing tokens after position {t} left the outputs at positions 0..{t} "
            f"unchanged (max difference {float(diff.max()):.1e})",
        )
        return
    rows, cols = bad.nonzero(as_tuple=True)
    ids = batch_ids(batch)
    who = [str(ids[int(r)]) if int(r) < len(ids) else f"row {int(r)}" for r in rows.unique()]
    g.check(
        "causal mask",
        False,
        f"changing only the tokens after position {t} changed the outputs at positions as early as {int(cols.min())} "
        f"(by up to {float(diff.max()):.3g}; examples {ids_text(who, 3)}): the model sees later tokens, so it "
        "learns to copy the next token instead of predicting it. Check the attention mask (is_causal, the "
        "triangular mask) and that padding masks are combined with it",
    )


def decoder_key(batch: Batch, input_key: str = "input_ids", label_key: str = "labels") -> str | None:
    """The batch's decoder input: ``decoder_input_ids`` (Hugging Face), or, measured from the batch, the one
    integer tensor other than the input and its mask laid out like the labels (B, T) while the input is not
    (a hand-written encoder-decoder under teacher forcing, whatever it names it: ``tgt_in``, ``decoder_inputs``)."""
    if torch.is_tensor(batch.get("decoder_input_ids")):
        return "decoder_input_ids"
    lab, inp = batch.get(label_key), batch.get(input_key)
    if not torch.is_tensor(lab) or lab.dim() != 2 or not torch.is_tensor(inp) or tuple(inp.shape) == tuple(lab.shape):
        return None
    found = [
        k
        for k, v in batch.items()
        if k not in (label_key, input_key)
        and "mask" not in k
        and torch.is_tensor(v)
        and not v.is_floating_point()
        and tuple(v.shape) == tuple(lab.shape)
    ]
    return found[0] if len(found) == 1 else None


def encoder_decoder(model: Any, batch: Batch, input_key: str = "input_ids", label_key: str = "labels") -> bool:
    """An encoder-decoder (T5, BART, a torch.nn one fed its decoder inputs): its outputs depend on the whole
    input by design, and its labels are the decoder's, not the encoder input's."""
    config = getattr(model, "config", None)
    return bool(getattr(config, "is_encoder_decoder", False)) or decoder_key(batch, input_key, label_key) is not None


def _differ(a: Batch, b: Batch) -> list[str]:
    out = []
    for k, v in a.items():
        w = b.get(k)
        if torch.is_tensor(v) and (not torch.is_tensor(w) or v.shape != w.shape or not torch.equal(v, w)):
            out.append(k)
    return out


def collate_deterministic(ctx: Context, g: Gate, examples: list[Example]) -> None:
    """The same examples collated twice give identical tensors, or random ones reproducible from the seed.

    Random masking (a masked-LM collator) or augmentation is legitimate in training as long as the
    seed reproduces it: resume and replay depend on that. Randomness the seed does not reproduce
    (an unseeded generator of its own) is a warning.
    """
    if not examples:
        return
    from ..datascan import collate
    from ..rng import rng_state, set_rng_state

    task = ctx.the_task
    start = rng_state()
    a = collate(task, ctx.params, examples)
    b = collate(task, ctx.params, examples)
    set_rng_state(start)
    c = collate(task, ctx.params, examples)
    set_rng_state(start)
    ids = [e.get("id") for e in examples]
    random, unseeded = _differ(a, b), _differ(a, c)
    if not random:
        g.check(
            "collate deterministic", True, f"the same {len(examples)} examples collated twice give identical tensors"
        )
    elif not unseeded:
        g.check(
            "collate deterministic",
            True,
            f"collating the same examples twice draws different {', '.join(random)} "
            "(random masking or augmentation), reproducibly from the seed: resume and replay see the same batches",
        )
    else:
        g.check(
            "collate deterministic",
            False,
            f"collating the same examples twice gave different {', '.join(unseeded)} (ids {ids_text(ids, 3)}) even "
            "from the same random state: the collate draws from a generator of its own that the seed does not "
            "control, so validation, replay and resume are not reproducible; draw from torch's or Python's global "
            "generator (the run's seed controls it), or seed yours from it at each call (seeded from the example "
            "alone, every epoch would repeat the same augmentation)",
            warn=True,
        )


def rows_distinct(g: Gate, examples: list[Example], batch: Batch) -> None:
    """Examples that differ give rows that differ: a collate that repeats one example (a loop variable reused)
    trains on one input per batch, and under a contrastive loss makes every in-batch negative a false one.

    Measured on the float inputs (images, audio, features), where equal rows cannot come from padding or
    cropping; a precondition is that the examples themselves differ (apart from their id and group).
    """
    content = [repr(sorted((k, repr(v)) for k, v in e.items() if k not in ("id", "group"))) for e in examples]
    name = "rows differ where examples differ"
    if len(examples) < 2 or len(set(content)) < 2:
        g.not_applicable(name, "fewer than two different examples in the first batch")
        return
    floats = {
        k: v
        for k, v in batch.items()
        if torch.is_tensor(v) and v.is_floating_point() and v.dim() >= 2 and v.shape[0] == len(examples)
    }
    if not floats:
        g.not_applicable(name, "the batch has no float inputs (images, audio, features) to compare")
        return
    same = [k for k, v in floats.items() if bool((v == v[:1]).reshape(v.shape[0], -1).all())]
    ids = [e.get("id") for e in examples]
    g.check(
        name,
        not same,
        f"{', '.join(floats)}: the {len(examples)} examples of the first batch give {len(examples)} different rows"
        if not same
        else f"{', '.join(same)} is identical in every row of the first batch although its {len(examples)} examples "
        f"differ ({ids_text(ids, 4)}): the collate repeats one example's input (a variable from the previous loop "
        "reused?), so the model sees one input per batch, and a contrastive loss treats its copies as negatives",
    )
