"""Overfit: a fresh copy of the user's model learns a tiny fixed subset (the mechanics work, not generalisation).

N examples (the campaign's ``overfit_examples`` clamped to 8..32, those with a
supervised target first) are trained on at every step with the user's own
model, loss, optimizer *and learning rate* (constant: warm-up would starve a
short fit; ``[pilot] overfit_lr`` or ``extras["overfit_lr"]`` sets another).
A rate that diverges (a non-finite value, or a loss that ends above its start)
is retried once at a tenth, and the gate says so. It runs ``overfit_steps``
steps; a model still clearly learning then goes on (up to ten times that)
until it has memorised the subset or stops improving: a slow rate is not a
defect. The verdict is measured, not one ratio for every loss:

- *learning*: the loss must fall below a threshold set by its own noise and
  floor: the lower of its start and the loss of a model that ignores its input
  (the entropy of the subset's targets, where they are class or token ids),
  minus three times its step-to-step noise (at least 5 %). A loss with a floor
  of its own (label smoothing, a balancing term) passes once it is clearly
  below that; a model that only learns the class frequencies does not;
- *memorisation*: where predictions exist (``predict``, or the argmax of the
  logits aligned by the label convention), the share of supervised targets
  predicted right must reach ``overfit_accuracy`` (0.9) and decides: token
  accuracy for a language model, as the first position of a text window can
  never be predicted. Learning goes on past ``overfit_steps`` while the share
  right still rises, and a rising share is a slow rate, not a defect. A loss
  left above its threshold with the ranking learned (clearly above what a model
  that ignores its input gets right) is explained, not failed, where the model's
  confidence puts the threshold out of reach: with every top prediction right
  its loss would still be above it (an output layer that does not train after
  a norm, a fixed temperature: see ``overfitjudge.capped``);
- *range*: a loss over discrete targets (cross-entropy, CTC: integer targets)
  that starts at or above 0 can never go below 0; a negative value is an
  impossible one (log-probabilities not normalised, a wrong reduction), a
  finding and not a pass.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from ... import events as ev
from ...contract import Example
from ..context import Context
from ..datascan import ids_text
from ..gate import Gate, Phase
from ..rng import rng_state, set_rng_state
from ..trainer import Trainer
from ..usercode import is_oom
from . import lossterms, overfitfloor
from .overfitfloor import Reading
from .overfitjudge import (
    Blind,
    Fit,
    above_chance,
    accuracy,
    blind_floor,
    capped,
    judge,
    new_best,
    paired_losses,
    reads_input,
    still_learning,
    trend_falls,
    trend_rises,
)

if TYPE_CHECKING:  # typing.NotRequired is Python 3.11; annotations here are never evaluated
    from typing import NotRequired


class Attempt(TypedDict):
    """One fit of a fresh copy to the fixed examples: its loss curve, where it stopped being finite, the accuracy
    at the end, and what a blind model reaches (its floor, whether the targets are discrete)."""

    losses: list[float]
    bad_step: int | None
    accuracy: Fit | None
    floor: float | None
    discrete: bool
    blind: NotRequired[Blind]
    shares: NotRequired[list[float]]  # the accuracy read every 10 steps
    first_accuracy: NotRequired[float | None]  # before the first update
    paired: NotRequired[tuple[float, float, str] | str | None]  # fitted vs inputs shuffled (paired_losses)
    passed_at: NotRequired[int | None]  # the step the fit first passed; it ran on from there (overfitfloor)
    overflow: NotRequired[int | None]  # the run-on's step where the loss stopped being finite
    before: NotRequired[Reading | None]  # the loss, its output's forms and its terms before the first update
    after: NotRequired[Reading | None]  # the same after the last


def run(ctx: Context, g: Gate) -> None:
    cfg = ctx.pilot_cfg
    base = ctx.trainer
    task = base.task
    n_want = min(max(cfg.overfit_examples, 8), 32)
    steps = min(max(cfg.overfit_steps, 1), 2000)
    need = cfg.overfit_accuracy
    train = base.splits["train"]
    scans = ctx.scans
    empty: set[Any] = set()
    if "train" in scans:
        empty = {i for i, k in zip(scans["train"].ids, scans["train"].supervised, strict=True) if k == 0}
    pool = [train[i] for i in range(min(len(train), 4 * n_want + len(empty)))]
    # an id that is not hashable (a dict) is the identifiers check's finding; here it is only never empty
    examples = [e for e in pool if not isinstance(e.get("id"), Hashable) or e.get("id") not in empty][:n_want]
    if len(examples) < min(n_want, 8):
        examples = pool[:n_want]
    n = len(examples)
    campaign_lr = float(base.params["lr"])
    chosen = task.extras.get("overfit_lr") or cfg.overfit_lr
    lr = float(chosen or campaign_lr)
    g.inputs["lr_source"] = "[pilot] overfit_lr" if chosen else "the campaign's learning rate"
    chunk = (
        base.microbatch if base.device.type == "cuda" else n
    )  # on a GPU, batches no larger than the proven microbatch
    mbs = [examples[i : i + chunk] for i in range(0, n, chunk)]
    g.inputs.update(
        {"examples": n, "steps": steps, "lr": lr, "microbatches": len(mbs), "ids": [e.get("id") for e in examples][:8]}
    )
    saved_rng = rng_state()
    try:
        attempt = _attempt(ctx, examples, mbs, lr, steps, need)
        losses = attempt["losses"]
        diverged = attempt["bad_step"] is not None or (len(losses) > 1 and losses[-1] > losses[0])
        if diverged and not chosen:
            g.extra["overfit_retry"] = {"lr": lr, "steps": len(losses), "last": _round(losses[-1])}
            lr = lr / 10
            g.inputs["lr"] = lr
            attempt = _attempt(ctx, examples, mbs, lr, steps, need)
    except Exception as exc:
        if not is_oom(exc):
            raise
        # The fresh model, its gradients and its optimizer state sit beside the piloted run's own: a second model
        # the long run never holds. Running out of memory here measures this check, not the campaign.
        free_fresh()
        first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        for name in PHASE.checks:
            g.not_applicable(
                name,
                f"a fresh copy of the model with its own optimizer did not fit beside the piloted one on this GPU "
                f"({type(exc).__name__}: {first}); the long run holds one model, so this says nothing about it. "
                "Run the pilot on a larger GPU, or lower [pilot] overfit_examples, to measure it",
            )
        return
    finally:
        set_rng_state(saved_rng)  # the piloted run's random stream is left as it was
    free_fresh()
    _verdict(g, attempt, n, lr, need)


def free_fresh() -> None:
    """Give back what the fresh model cached on the GPU, so the next phase's reserved memory starts from the piloted
    run's own and no phase after this one is measured with a model the long run never holds."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _verdict(g: Gate, attempt: Attempt, n: int, lr: float, need: float) -> None:
    losses, bad_step = attempt["losses"], attempt["bad_step"]
    acc: Fit | None = attempt["accuracy"]
    floor: float | None = attempt["floor"]
    finite = bad_step is None
    every = max(1, len(losses) // 20)
    passed_at = attempt.get("passed_at")
    fit = losses[:passed_at] if passed_at else losses  # the fit is judged up to where it passed; the run-on apart
    j = judge([x for x in fit if math.isfinite(x)] or [math.nan], floor)
    g.extra["overfit"] = {
        "losses": [_round(x) for x in losses[::every]] + ([_round(losses[-1])] if (len(losses) - 1) % every else []),
        "steps": len(losses),
        "examples": n,
        "lr": lr,
        "accuracy": None if acc is None else round(acc.share, 4),
        "targets": None if acc is None else acc.total,
        "top_loss": None if acc is None or acc.top_loss is None else _round(acc.top_loss),
        "threshold": _round(j["threshold"]),
        "noise": _round(j["noise"]),
        "floor": None if floor is None else _round(floor),
        "passed_at": passed_at,
        "settled": _round(overfitfloor.windows(losses)[-1]) if len(losses) >= overfitfloor.WINDOW else None,
    }
    retry = g.extra.get("overfit_retry")
    at = f"lr {lr:g}" + (f", a tenth of {retry['lr']:g}, which diverged" if retry else "")
    g.check(
        "finite throughout",
        finite,
        f"{len(losses)} steps, every loss and gradient finite"
        if finite
        else f"non-finite {'loss' if not math.isfinite(losses[-1]) else 'gradient'} at overfit step {bad_step} "
        f"(loss {losses[-1]:.4g}, {at}); lower the learning rate or look for a division by zero",
    )
    memorised = acc is not None and acc.share >= need
    fell = finite and j["end"] < j["threshold"]
    first = attempt.get("first_accuracy")
    rising = acc is None or (first is not None and acc.share > first)
    ranking = acc is not None and trend_rises(attempt.get("shares", []), acc.total)
    # above the threshold only because the model's confidence cannot reach it, while its ranking learned: measured
    blind_ref: Blind = attempt.get("blind") or Blind(floor, False)
    why_above = capped(j, acc, first, blind_ref) if finite and not fell else None
    # the budget ran out while the model was still clearly learning: a slow rate, not a defect it can see
    paired = attempt.get("paired")
    blind_output = isinstance(paired, tuple) and not reads_input(paired, j["noise"])
    if acc is not None and blind_ref.majority is not None and above_chance(acc.share, blind_ref.majority, acc.total):
        # predictions clearly better than a model that ignores its input can get (its most frequent target) read
        # the input, whatever the paired losses say (they differ little where the output's scale is bounded)
        blind_output = False
    slow = (
        finite
        and not memorised
        and (acc is not None or not fell)
        and rising
        and not blind_output  # converging to what a model that ignores its input reaches is not slow learning
        and (trend_falls(losses) or ranking)
    )
    # without predictions, a loss still clearly falling above the input-blind floor while the output does not
    # read its input yet (a CTC model emits blanks before it reads its input) is slow too; on a plateau it fails
    slow_blind = (
        acc is None
        and finite
        and not fell
        and blind_output
        and trend_falls(losses)
        and (floor is None or j["end"] > floor)
    )
    slow = slow or slow_blind
    if slow:
        g.remedy = "a slow rate, not a defect: raise [pilot] overfit_steps (or overfit_lr) to see it memorise"
    blind = (
        f"the loss of a model that ignores its input (the targets' entropy) is {floor:.3f}; "
        if floor is not None
        else ""
    )
    how = (
        f"{j['start']:.3f} -> {j['end']:.3f} (its best {max(5, min(20, len(losses) // 5))}-step mean) in "
        f"{len(fit)} steps on {n} fixed examples, {at}; threshold {j['threshold']:.3f} = "
        f"{'its start' if floor is None or j['ref'] == j['start'] else 'the input-blind loss'} {j['ref']:.3f} less "
        f"3x its noise ({j['noise']:.2g}) or 5%"
    )
    proves = "; this proves the mechanics, not generalisation"
    g.check(
        "loss falls below threshold",
        fell or memorised or why_above is not None,
        how
        + (
            proves
            if fell
            else f"; above it, but the subset is memorised ({acc.share:.0%} of the targets right), which decides ("
            + (why_above or "a loss with a floor of its own, or one still catching up with its predictions")
            + ")"
            + proves
            if memorised and acc is not None
            else f"; above it, {why_above}" + proves
            if why_above is not None
            else f"; still falling when the {len(losses)} steps ran out: a slow rate, not yet a fit"
            if slow
            else f"; {blind}the model cannot fit {n} examples it sees at every step"
        ),
        warn=slow and why_above is None,
    )
    if acc is None:  # unknown is never a pass: the loss check above is the only judgement here
        g.not_applicable(
            "targets recovered",
            "no class predictions to compare with the targets (no predict(), and no logits shaped like the targets: "
            "float or multi-hot targets, a generated output, or logits at another resolution); the loss decides",
        )
    else:
        share, total, wrong = acc.share, acc.total, acc.wrong
        g.check(
            "targets recovered",
            share >= need,
            f"{share:.1%} of {total} supervised targets predicted right (threshold {need:.0%})"
            + (f"; examples with a wrong target: {ids_text(wrong)}" if wrong and share < need else "")
            + (
                f"; still learning when the {len(losses)} steps ran out ({first or 0:.0%} right at the start, "
                + ("the share right still rising" if ranking else "the loss still falling")
                + f"): a slow rate ({at}), not a defect it can see; raise [pilot] overfit_steps or "
                "overfit_lr to see it memorise"
                if slow
                else ""
            ),
            warn=slow,
        )
    if acc is None:
        input_matters(g, attempt, j["noise"], slow)
    overfitfloor.in_range(g, attempt["losses"], attempt["discrete"])
    if finite:
        overfitfloor.bounded(g, losses, passed_at, attempt.get("overflow"))
        settled = overfitfloor.windows(losses)[-1] if len(losses) >= overfitfloor.WINDOW else losses[-1]
        overfitfloor.floor(g, attempt.get("after"), settled, attempt["discrete"])
    lossterms.after_fit(g, attempt.get("before"), attempt.get("after"))
    failed = g.failures()
    objective = {overfitfloor.BOUNDED, overfitfloor.FLOOR}
    if failed and all(c["name"] in objective for c in failed):
        g.message = (  # the fit worked; what the loss did past it says the objective is not the one meant
            f"overfit failed: {'; '.join(c['name'] + ': ' + c['detail'] for c in failed)}. The model fits; the loss "
            "it minimises is not the objective meant, and the long run would optimise it as written"
        )
    elif failed:
        g.message = (
            f"overfit failed: {'; '.join(c['name'] + ': ' + c['detail'] for c in failed)}. "
            f"A model that cannot memorise {n} fixed examples will not learn the full data set: check that "
            "its output depends on its input (pooling, masking), the labels, the loss, the learning rate "
            "and frozen parameters before paying for a long run. (Passing proves the mechanics, not generalisation.)"
        )


def input_matters(g: Gate, attempt: Attempt, noise: float, slow: bool = False) -> None:
    """Without predictions, a falling loss could be a model learning a constant (uniform contrastive scores):
    the fitted loss must be clearly lower than with each row's input paired with another row."""
    name = "output depends on the input"
    paired = attempt.get("paired")
    if paired is None:
        return
    if isinstance(paired, str):
        g.not_applicable(name, paired)
        return
    fitted, shuffled, moved = paired
    ok = reads_input(paired, noise)
    g.check(
        name,
        ok,
        f"fitted loss {fitted:.4g}; with each row's {moved} paired with another row's {shuffled:.4g}"
        + (
            ""
            if ok
            else ": about the same, so its output does not depend on its input yet; the loss was still falling when "
            "the steps ran out (a CTC model emits blanks before it reads its input): raise [pilot] overfit_steps "
            "or overfit_lr to see it fit"
            if slow
            else ": the same, so the model's output does not depend on its input (it learned a constant: a "
            "pooled position that is the same in every row, an input that never reaches the output); the model "
            "cannot fit the examples it sees at every step"
        ),
        warn=slow,
    )


def _attempt(
    ctx: Context,
    examples: list[Example],
    mbs: list[list[Example]],
    lr: float,
    steps: int,
    need: float,
) -> Attempt:
    base = ctx.trainer
    params = dict(base.params)
    params.update(lr=lr, schedule="constant", warmup_updates=0, weight_decay=0.0, dropout=0.0, accumulation=len(mbs))
    task = dataclasses.replace(base.task, scheduler=None)  # a constant rate: warm-up would starve a short fit
    tr = Trainer(task, params, base.seed, base.device, splits={"train": examples, "val": examples})
    tr.microbatch, tr.accumulation = len(mbs[0]), len(mbs)
    tr.load_data()
    tr.build()  # a fresh model from the task, never a copy of the one being piloted
    for m in tr.model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    blind = blind_floor(tr, examples)
    floor, discrete = blind.floor, blind.discrete
    before = overfitfloor.read(tr, mbs)  # the loss, its output's own forms and its named terms before any update
    first = accuracy(tr, examples)
    shares = [first.share] if first is not None else []  # the accuracy read every 10 steps: is the ranking rising?
    losses: list[float] = []
    bad_step: int | None = None
    acc: Fit | None = None
    at = 0
    ceiling = min(2000, 10 * steps)
    step = 0
    # the fit passed (memorised, or below its threshold reading its input) at this step; it runs on until its loss
    # settles or the run-on's budget is spent, so the whole curve is judged (overfitfloor)
    passed_at: int | None = None
    until = 0
    overflow: int | None = None
    while step < ceiling:
        step += 1
        loss = float(tr.accumulate(mbs, check_finite=False)["loss"])
        if passed_at is not None and not math.isfinite(loss):
            overflow = step  # a loss that overflows after its fit fell without limit: the run-on's finding
            break
        losses.append(loss)
        if not math.isfinite(loss):
            bad_step = step
            break
        if discrete and losses[0] >= 0 and loss < -1e-6 * max(1.0, losses[0]):
            break  # an impossible value: the finding is made (see in_range)
        norm = tr.apply(check_finite=False).get("grad_norm")
        if norm is None and tr.scaler is None:  # with fp16 the scaler skips such a step by design
            if passed_at is not None:
                overflow = step
                break
            bad_step = step
            break
        if passed_at is not None:
            run = losses[passed_at - 1 :]
            if step >= until and overfitfloor.accelerating(run) and step < passed_at + overfitfloor.RUNON_MAX:
                until = min(ceiling, step + overfitfloor.WINDOW)  # still falling faster: where does it end?
            if overfitfloor.runaway(run, losses[0]):
                break  # fell by more than its whole start, faster and faster: the finding is made
            if step >= until or (
                len(run) > 2 * overfitfloor.WINDOW
                and step % overfitfloor.WINDOW == 0
                and overfitfloor.settled(run, losses[0])
            ):
                break
            continue
        if step % 10 and step != steps:
            continue
        j = judge(losses, floor)
        acc, at = accuracy(tr, examples), step
        if acc is not None:
            shares.append(acc.share)
        passed = (acc is not None and acc.share >= need) or (  # memorised
            acc is None and j["end"] < j["threshold"] and reads_input(paired_losses(tr, mbs), j["noise"])
        )  # without predictions: below its threshold, and the output depends on the input
        if passed:
            passed_at, until = step, min(ceiling, step + overfitfloor.runon_steps(step))
            continue
        # learning goes on while the loss falls or, where predictions exist, while the ranking still improves (a
        # loss held up by its output's scale barely moves while more targets come out right)
        ranking = acc is not None and (new_best(shares) or trend_rises(shares, acc.total))
        if step >= steps and not still_learning(losses) and not ranking:
            break
    if bad_step is None and overflow is None and at != len(losses):
        acc = accuracy(tr, examples)  # after the last update
        if acc is not None:
            shares.append(acc.share)
    paired = paired_losses(tr, mbs) if bad_step is None and overflow is None else None
    after = overfitfloor.read(tr, mbs) if bad_step is None and overflow is None else None
    return {
        "passed_at": passed_at,
        "overflow": overflow,
        "before": before,
        "after": after,
        "losses": losses,
        "bad_step": bad_step,
        "accuracy": acc,
        "blind": blind,
        "floor": floor,
        "discrete": discrete,
        "shares": shares,
        "first_accuracy": first.share if first is not None else None,
        "paired": paired,
    }


def _round(x: float) -> float | None:
    return round(x, 5) if math.isfinite(x) else None


def inputs(ctx: Context) -> dict[str, ev.JSON]:
    return {
        "examples": ctx.pilot_cfg.overfit_examples,
        "steps": ctx.pilot_cfg.overfit_steps,
    }


PHASE = Phase(
    "overfit",
    run,
    remedy="the model cannot learn a few fixed examples: check labels, the loss, the learning rate "
    "([pilot] overfit_lr), frozen parameters",
    checks=(
        "finite throughout",
        "loss falls below threshold",
        "targets recovered",
        "output depends on the input",
        "loss in range",
        overfitfloor.BOUNDED,
        overfitfloor.FLOOR,
        lossterms.FALL,
    ),
    independent=True,
    inputs=inputs,
    doc="a fresh copy learns a tiny fixed subset",
)
