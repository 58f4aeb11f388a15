"""Which output a target is scored against: measured on the user's own model and loss, never assumed.

The data gate builds a *probe* of the model (``Task.build_model`` under a saved random state, so the run's own
model is drawn exactly as without it), runs the user's loss on one collated batch twice, once as collated and
once with a single target changed, and compares the gradients of the loss with respect to the model's outputs
(its logits). Only the outputs that target is scored against see their gradient change, whatever the model is
(BatchNorm, attention, a frozen teacher): the gradient is taken at the outputs, so only the loss's own structure
counts.

From that one measurement:

- ``rows``: the examples whose outputs the target reaches. A target that reaches every example's output is a
  loss that compares each target with every output (a (B,) target against (B, 1) outputs broadcasts to (B, B)).
- ``offset``: for a target at position t of a sequence, the output position p it is scored at (``t - p``: 0 when
  the labels are laid out like the outputs, 1 when the loss shifts them, as Hugging Face causal LMs do).

The label convention a task declares is a hint checked against ``offset``; which token an output learns to
predict follows from ``offset`` and how the labels relate to the inputs the model reads (see ``semantics``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ...contract import Batch
from .. import outputs
from ..context import Context
from ..datascan import batch_ids
from ..gate import Gate
from ..rng import rng_state, set_rng_state
from .semantics import decoder_key


@dataclass
class Scored:
    """What changing one target changed in the loss's gradient at the model's outputs."""

    row: int  # the example whose target was changed
    pos: int | None  # its position in a sequence of targets (None: one target per example)
    rows: list[int] = field(default_factory=list)  # output rows whose gradient changed
    positions: list[int] = field(default_factory=list)  # in ``row``, the output positions whose gradient changed
    own: float = 0.0  # the change at the example's own output
    others: float = 0.0  # the largest change at another example's output
    least: float = 0.0  # the smallest change at another example's output
    shape: tuple[int, ...] = ()  # the outputs' shape
    first_reaches: bool | None = None  # where ``row``'s target moved nothing: whether the first example's does
    floating: bool = False  # real-valued targets (a change of 1 need not move an L1 or Huber gradient)

    def offset(self, feeds_decoder: bool = False) -> int | None:
        """``t - p`` for the one output position the target at ``t`` is scored at; None when not exactly one.

        ``feeds_decoder``: the model makes its decoder inputs from the labels (T5, BART, Whisper without
        ``decoder_input_ids``), so a changed label also changes every later output of the causal decoder:
        the earliest changed position is the one it is scored at.
        """
        if self.pos is None or not self.positions or (len(self.positions) != 1 and not feeds_decoder):
            return None
        return self.pos - self.positions[0]


@dataclass
class Probe:
    model: Any
    encoder_decoder: bool
    error: str = ""  # why no probe could be built or measured (the checks fall back to the declaration)


@contextmanager
def kept_rng() -> Iterator[None]:
    """Whatever runs inside draws from the random streams without moving them for the run."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def build_probe(ctx: Context) -> Probe:
    """The model as ``build_model`` returns it, in eval mode, built without moving the run's random state."""
    from ..trainer import user
    from .semantics import encoder_decoder

    try:
        with kept_rng():
            model = user("build_model", ctx.the_task.build_model, ctx.params)
        model = model.to(ctx.device).eval()
    except Exception as exc:  # the run's own build, in the forward phase, reports the user's error
        return Probe(None, False, f"the model could not be built for the measurement ({type(exc).__name__}: {exc})")
    return Probe(model, encoder_decoder(model, {}))


def release(probe: Probe) -> None:
    probe.model = None
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _pick(lab: torch.Tensor, ignore: int) -> tuple[int, int | None] | None:
    """The target to change: in the row with the most targets, the middle one (away from the edges); one target per
    example: the middle example's (a loss that reads only the first or the last example does not score it)."""
    if lab.dim() == 1:
        rows = (lab != ignore).nonzero().flatten().tolist()
        return (int(rows[len(rows) // 2]), None) if rows else None
    sup = (lab != ignore).reshape(lab.shape[0], lab.shape[1], -1).any(-1)
    r = int(sup.sum(1).argmax())
    cols = sup[r].nonzero().flatten().tolist()
    if not cols:
        return None
    inner = [c for c in cols if 1 <= c <= lab.shape[1] - 2] or cols
    return r, int(inner[len(inner) // 2])


def _changed(lab: torch.Tensor, where: tuple[int, int | None], classes: int) -> torch.Tensor:
    r, pos = where
    out = lab.clone()
    idx: tuple[int, ...] = (r,) if pos is None else (r, pos)
    flat = out[idx].reshape(-1)
    if out.is_floating_point():
        flat[0] = flat[0] + 1.0
    else:
        flat[0] = (flat[0] + 1) % max(classes, 2)
    out[idx] = flat.reshape(out[idx].shape)
    return out


def _grad_at_outputs(ctx: Context, model: Any, batch: Batch) -> torch.Tensor | None:
    from ..trainer import user

    task = ctx.the_task
    fn = task.loss if task.loss is not None else outputs.default_loss
    with torch.enable_grad(), outputs.capture(model) as cap:
        lo = outputs.read_loss(user("loss", fn, model, batch), ctx.device)
    logits = cap.logits
    if logits is None or not logits.requires_grad or not lo.value.requires_grad:
        return None
    (g,) = torch.autograd.grad(lo.value.float().sum(), logits, allow_unused=True)
    return None if g is None else g.detach().float()


def measure(ctx: Context, probe: Probe, batch: Batch) -> Scored | str:
    """Change one target of ``batch`` and see which outputs' gradients change; a string says why it could not."""
    task = ctx.the_task
    lab = batch.get(task.label_key)
    if probe.model is None:
        return probe.error or "no model to measure with"
    if not torch.is_tensor(lab) or lab.dim() == 0 or lab.shape[0] < 2:
        return "the batch has fewer than two rows of targets"
    where = _pick(lab, task.ignore_index)
    if where is None:
        return "no supervised target in the batch"
    on = {k: (v.to(ctx.device) if torch.is_tensor(v) else v) for k, v in batch.items()}
    try:
        with kept_rng():
            start = rng_state()
            a = _grad_at_outputs(ctx, probe.model, on)
            if a is None:
                return "the model's outputs (logits) do not reach the loss through a tensor Cockpit can see"
            classes = a.shape[-1] if a.dim() >= 2 else 2
            set_rng_state(start)  # the same draws for both calls: a stochastic loss compares like with like
            b = _grad_at_outputs(ctx, probe.model, {**on, task.label_key: _changed(on[task.label_key], where, classes)})
            first = _pick(lab[:1], task.ignore_index) if lab.dim() == 1 and where[0] != 0 else None
            c = None
            if b is not None and first is not None and a.shape == b.shape and torch.equal(a, b):
                set_rng_state(start)  # the middle example's target moved nothing: does the first one's?
                c = _grad_at_outputs(
                    ctx, probe.model, {**on, task.label_key: _changed(on[task.label_key], first, classes)}
                )
    except Exception as exc:  # the measurement is an extra: whatever stops it, the checks fall back and say why
        return f"the loss could not be run with one target changed ({type(exc).__name__}: {str(exc)[:160]})"
    if b is None or a.shape != b.shape or a.dim() == 0 or a.shape[0] != lab.shape[0]:
        return "the outputs are not laid out one row per example"
    diff = (a - b).abs()
    scale = float(torch.maximum(a.abs().max(), b.abs().max()))
    if scale == 0.0:
        return "the loss gives no gradient at the outputs"
    tol = 1e-5 * scale
    per_row = diff.reshape(diff.shape[0], -1).amax(1)
    r, pos = where
    s = Scored(row=r, pos=pos, shape=tuple(a.shape), floating=lab.is_floating_point())
    s.rows = [int(i) for i in (per_row > tol).nonzero().flatten().tolist()]
    s.own = float(per_row[r])
    rest = torch.cat([per_row[:r], per_row[r + 1 :]])
    s.others = float(rest.max()) if rest.numel() else 0.0
    s.least = float(rest.min()) if rest.numel() else 0.0
    if pos is not None and a.dim() >= 3:
        per_pos = diff[r].reshape(diff.shape[1], -1).amax(1)
        s.positions = [int(i) for i in (per_pos > tol).nonzero().flatten().tolist()]
    if c is not None and c.shape == a.shape:
        s.first_reaches = bool(((a - c).abs() > tol).any())
    return s


# --------------------------------------------------------------------------- the checks (data gate)

NO_MEASURE = "targets aligned as declared"
OWN = "targets scored against their own example"
COUPLED = 0.5  # another example's output changing by this share of the example's own: the loss mixes examples


def own_example(g: Gate, batch: Batch, s: Scored | str) -> None:
    """Each example's target is scored against that example's output, not against the whole batch's."""
    if isinstance(s, str):
        g.not_applicable(OWN, s)
        return
    ids = batch_ids(batch)
    who = str(ids[s.row]) if s.row < len(ids) else f"row {s.row}"
    n = s.shape[0]
    mixed = [i for i in s.rows if i != s.row]
    if n < 3:
        g.not_applicable(OWN, f"{n} examples in the batch: a loss over pairs and a broadcast target look alike")
        return
    if s.floating:  # a real-valued target moved by 1 may leave an L1 or Huber gradient where it was: no verdict
        pass
    elif s.row not in s.rows and mixed:  # another example's output took the change, its own none
        named = ", ".join(str(ids[i]) if i < len(ids) else f"row {i}" for i in mixed[:3])
        g.check(
            OWN,
            False,
            f"changing only the target of {who} changed the loss's gradient at the output of {named} and not at "
            f"its own: the loss scores each target against another example's output, so the model learns "
            "targets that belong to other inputs. Look for targets reordered apart from the outputs (a roll, a "
            "sort, a shuffle of one of the two, an index off by one)",
        )
        return
    if not s.floating and not s.rows and s.first_reaches:  # the first example's target counts, the middle's not
        g.check(
            OWN,
            False,
            f"changing the target of {who} changed nothing in the loss's gradient, where the first example's "
            f"target does: the loss reads only part of the batch (an index such as out[:1] or labels[0], a "
            "reduction over the wrong dimension), so most examples never train the model",
        )
        return
    if not s.rows:
        g.not_applicable(OWN, f"changing the target of {who} moved no output's gradient: the loss does not read it")
        return
    # every other example's output moved as much as its own: a target compared with the whole batch (a pair or
    # preference loss moves its partner only; class weights from the batch's counts move the rest a little)
    if s.own > 0 and s.least >= COUPLED * s.own:
        g.check(
            OWN,
            False,
            f"changing only the target of {who} changed the loss's gradient at the outputs of {len(mixed) + 1} of "
            f"the {n} examples of the batch (every other one by {s.others / s.own:.0%} of its own): the loss scores "
            "each target against every example's output, so the model learns the batch's average. A target "
            f"shaped unlike the outputs {s.shape} broadcasts (a (B,) target against (B, 1) outputs makes (B, B)): "
            "give the targets the outputs' shape",
        )
        return
    extra = f"; {len(mixed)} other outputs changed by at most {s.others / s.own:.0%} of it" if mixed and s.own else ""
    g.check(OWN, True, f"changing the target of {who} changed the gradient at its own output{extra}")


def _agreement(lab: torch.Tensor, inp: torch.Tensor, sup: torch.Tensor, real: torch.Tensor, k: int) -> float | None:
    """Share of supervised labels equal to the input ``k`` positions later (where that input is real)."""
    width = lab.shape[1]
    if k >= width:
        return None
    s = sup[:, : width - k] & real[:, k:]
    n = int(s.sum())
    if n == 0:
        return None
    return int(((lab[:, : width - k] == inp[:, k:]) & s).sum()) / n


WHAT = {
    0: "the token at the output's own input position: the model learns to copy its input",
    1: "the next token",
    2: "two tokens ahead: the labels are shifted twice (in the collate and again in the loss)",
}


def _what(d: int) -> str:
    if d in WHAT:
        return WHAT[d]
    return f"{d} tokens ahead" if d > 0 else f"a token {-d} behind its input: the model learns to copy its input"


def targets_aligned(ctx: Context, g: Gate, batch: Batch, s: Scored | str, encdec: bool) -> None:
    """Generation: which token each output learns to predict, from the measured offset and the labels' relation
    to the inputs the model reads; the declared ``label_convention`` is a hint checked against the offset."""
    task = ctx.the_task
    lab = batch.get(task.label_key)
    if not torch.is_tensor(lab) or lab.dim() != 2 or lab.is_floating_point():
        return
    declared = {"aligned": 0, "shift_in_loss": 1}[task.label_convention]
    key = decoder_key(batch, task.input_key, task.label_key) if encdec else None
    feeds = encdec and key is None
    offset = s.offset(feeds) if isinstance(s, Scored) else None
    if offset is None:
        if encdec:
            why = s if isinstance(s, str) else f"changing one label changed the outputs at positions {s.positions[:6]}"
            g.not_applicable(NO_MEASURE, f"an encoder-decoder whose loss could not be measured: {why}")
            return
        targets_declared(ctx, g, batch)
        return
    dec = (batch.get(key) if key else None) if encdec else batch.get(task.input_key)
    sup = (lab != task.ignore_index) & (lab >= 0)
    shares: dict[int, float] = {}
    if encdec and not torch.is_tensor(dec):
        shares = {1: 1.0}  # the model makes its decoder inputs from the labels, shifted right
        relation = "the model makes its decoder inputs from the labels shifted right (label t is decoder input t+1)"
    elif torch.is_tensor(dec) and tuple(dec.shape) == tuple(lab.shape) and not dec.is_floating_point():
        mask = batch.get(task.mask_key) if not encdec else None
        real = mask != 0 if torch.is_tensor(mask) and tuple(mask.shape) == tuple(lab.shape) else torch.ones_like(sup)
        shares = {k: v for k in (0, 1, 2) if (v := _agreement(lab, dec, sup, real, k)) is not None}
        relation = ", ".join(f"{v:.0%} equal input t+{k}" for k, v in shares.items())
    else:
        relation = "the labels are not laid out like the inputs"
    where = f"the loss scores the label at position t against output t{'-' + str(offset) if offset else ''}"
    measured = {0: "aligned", 1: "shift_in_loss"}.get(offset)
    hint = ""
    if offset != declared:
        hint = f" (label_convention declares {task.label_convention!r}, measured {measured or offset!r}"
        if measured is not None:
            task.label_convention = measured  # later checks read the outputs the way the loss does
            hint += ": the later checks use the measurement"
        hint += ")"
    k, share = max(shares.items(), key=lambda kv: kv[1]) if shares else (None, 0.0)
    causal = bool(task.causal) or encdec
    if k is None or share < 0.5:
        g.check(
            NO_MEASURE,
            True,
            f"{where}{hint}; the labels are not the inputs shifted ({relation or 'nothing to compare'}): another "
            "target stream (a masked LM, a tagging task), so there is no shift to check",
        )
        return
    d = offset + k
    if causal and d == 1:
        g.check(
            NO_MEASURE,
            True,
            f"{where}{hint}; {share:.0%} of the labels are input t+{k}: each output learns to predict the next token",
        )
        return
    if not causal:
        g.check(
            NO_MEASURE,
            False,
            f"{where}{hint}, and {share:.0%} of the supervised labels are the input at position t+{d} that the "
            "(bidirectional) model reads: it learns to copy its input instead of predicting hidden tokens. Supervise "
            f"only the positions whose input is masked; set the others to {task.ignore_index}",
        )
        return
    g.check(
        NO_MEASURE,
        False,
        f"{where}{hint}, and {share:.0%} of the labels are input t+{k}: each output learns to predict {_what(d)}. "
        + (
            f"The decoder reads the labels unshifted ({key or 'decoder_input_ids'}): give it the labels shifted "
            "right (or no decoder inputs, where the model shifts the labels itself)"
            if encdec
            else "Shift the labels once: either in the collate (labels[t] = input[t + 1]) or in the loss"
        ),
    )


def targets_declared(ctx: Context, g: Gate, batch: Batch) -> None:
    """No measurement: labels against the inputs as the declared label convention says (a weaker check)."""
    task = ctx.the_task
    lab, inp = batch.get(task.label_key), batch.get(task.input_key)
    if not (torch.is_tensor(lab) and torch.is_tensor(inp)) or tuple(lab.shape) != tuple(inp.shape):
        return
    sup = (lab != task.ignore_index) & (lab >= 0)
    mask = batch.get(task.mask_key)
    real = mask != 0 if torch.is_tensor(mask) and tuple(mask.shape) == tuple(inp.shape) else torch.ones_like(sup)
    # a row's last target is the token after its inputs (the window's end, the end marker): never an input
    width = lab.shape[1]
    idx = torch.arange(width, device=lab.device).expand_as(sup)
    last = torch.where(sup, idx, torch.full_like(idx, -1)).amax(1, keepdim=True)
    inner = sup & (idx != last)
    want = 0 if task.label_convention == "shift_in_loss" else 1
    shares = {k: v for k in (0, 1, 2) if (v := _agreement(lab, inp, inner if k else sup, real, k)) is not None}
    got = shares.get(want)
    if got is None:
        return
    words = {
        0: "equal the inputs (labels[t] = input[t])",
        1: "are the next inputs (labels[t] = input[t + 1])",
        2: "are two tokens ahead (labels[t] = input[t + 2])",
    }
    said = "'shift_in_loss' (the loss shifts)" if want == 0 else "'aligned' (labels already shifted)"
    if got >= 0.9:
        g.check(
            NO_MEASURE,
            True,
            f"{got:.0%} of supervised labels {words[want]}, as label_convention {said} says "
            "(declared, not measured: the loss's outputs could not be probed)",
        )
        return
    best = max(shares, key=lambda k: shares[k])
    if best == want or shares[best] < 0.5:
        seen = ", ".join(f"{v:.0%} at shift {k}" for k, v in shares.items())
        g.check(
            NO_MEASURE,
            True,
            f"the labels are not the inputs shifted ({seen}): another target stream (an "
            "encoder-decoder, a tagging task), so there is no shift to check",
        )
        return
    g.check(
        NO_MEASURE,
        False,
        f"only {got:.0%} of supervised labels {words[want]} as label_convention {said} says; {shares[best]:.0%} "
        f"{words[best]}. Labels shifted twice (in the collate and again in the loss) or not at all train the model "
        "to predict the wrong token: shift once, and declare where",
    )
