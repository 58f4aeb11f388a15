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
  never be predicted;
- *range*: a loss over discrete targets (cross-entropy, CTC: integer targets)
  that starts at or above 0 can never go below 0; a negative value is an
  impossible one (log-probabilities not normalised, a wrong reduction), a
  finding and not a pass.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

import torch

from ..context import Context
from ..datascan import ids_text, rows
from ..gate import Gate, Phase
from ..rng import rng_state, set_rng_state
from ..trainer import Trainer


def run(ctx: Context, g: Gate) -> None:
    cfg = ctx.pilot_cfg
    base = ctx.trainer
    task = base.task
    n_want = min(max(int(cfg.get("overfit_examples", 16)), 8), 32)
    steps = min(max(int(cfg.get("overfit_steps", 200)), 1), 2000)
    need = float(cfg.get("overfit_accuracy", 0.9))
    train = base.splits["train"]
    scans = ctx.scans
    empty: set[Any] = set()
    if "train" in scans:
        empty = {i for i, k in zip(scans["train"].ids, scans["train"].supervised, strict=True) if k == 0}
    pool = [train[i] for i in range(min(len(train), 4 * n_want + len(empty)))]
    examples = [e for e in pool if e.get("id") not in empty][:n_want]
    if len(examples) < min(n_want, 8):
        examples = pool[:n_want]
    n = len(examples)
    campaign_lr = float(base.params["lr"])
    chosen = task.extras.get("overfit_lr") or cfg.get("overfit_lr")
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
    finally:
        set_rng_state(saved_rng)  # the piloted run's random stream is left as it was
    _verdict(g, attempt, n, lr, need)


def judge(losses: list[float], floor: float | None) -> dict[str, float]:
    """The loss's threshold from its own figures: the lower of its start and the input-blind floor, minus three
    times its step-to-step noise (at least 5 % of that reference); and where it ended (its best window)."""
    w = max(5, min(20, len(losses) // 5))
    tail = losses[-w:]
    noise = statistics.pstdev(tail) if len(tail) > 1 else 0.0
    ref = losses[0] if floor is None else min(losses[0], floor)
    margin = max(3 * noise, 0.05 * abs(ref))
    windows = [statistics.fmean(losses[i : i + w]) for i in range(0, max(1, len(losses) - w + 1))]
    return {"start": losses[0], "ref": ref, "noise": noise, "threshold": ref - margin, "end": min(windows)}


def _verdict(g: Gate, attempt: dict[str, Any], n: int, lr: float, need: float) -> None:
    losses, bad_step, acc = attempt["losses"], attempt["bad_step"], attempt["accuracy"]
    floor: float | None = attempt["floor"]
    finite = bad_step is None
    every = max(1, len(losses) // 20)
    j = judge([x for x in losses if math.isfinite(x)] or [math.nan], floor)
    g.extra["overfit"] = {
        "losses": [_round(x) for x in losses[::every]] + ([_round(losses[-1])] if (len(losses) - 1) % every else []),
        "steps": len(losses),
        "examples": n,
        "lr": lr,
        "accuracy": None if acc is None else round(acc[0], 4),
        "targets": None if acc is None else acc[1],
        "threshold": _round(j["threshold"]),
        "noise": _round(j["noise"]),
        "floor": None if floor is None else _round(floor),
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
    memorised = acc is not None and acc[0] >= need
    fell = finite and j["end"] < j["threshold"]
    first = attempt.get("first_accuracy")
    rising = acc is None or (first is not None and acc[0] > first)
    # the budget ran out while the model was still clearly learning: a slow rate, not a defect it can see
    paired = attempt.get("paired")
    blind_output = isinstance(paired, tuple) and not _reads_input(paired, j["noise"])
    slow = (
        finite
        and not memorised
        and (acc is not None or not fell)
        and rising
        and not blind_output  # converging to what a model that ignores its input reaches is not slow learning
        and trend_falls(losses)
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
        f"{len(losses)} steps on {n} fixed examples, {at}; threshold {j['threshold']:.3f} = "
        f"{'its start' if floor is None or j['ref'] == j['start'] else 'the input-blind loss'} {j['ref']:.3f} less "
        f"3x its noise ({j['noise']:.2g}) or 5%"
    )
    g.check(
        "loss falls below threshold",
        fell or memorised,
        how
        + (
            "; this proves the mechanics, not generalisation"
            if fell
            else f"; above it, but the subset is memorised ({acc[0]:.0%} of the targets right), which decides (a loss "
            "with a floor of its own, or one still catching up with its predictions); this proves the mechanics, "
            "not generalisation"
            if memorised and acc is not None
            else f"; still falling when the {len(losses)} steps ran out: a slow rate, not yet a fit"
            if slow
            else f"; {blind}the model cannot fit {n} examples it sees at every step"
        ),
        warn=slow,
    )
    if acc is None:
        g.check(
            "targets recovered",
            True,
            "no predictions to compare (no predict() and no logits in the model's output): judged on the loss alone",
        )
    else:
        share, total, wrong = acc
        first = attempt.get("first_accuracy")
        g.check(
            "targets recovered",
            share >= need,
            f"{share:.1%} of {total} supervised targets predicted right (threshold {need:.0%})"
            + (f"; examples with a wrong target: {ids_text(wrong)}" if wrong and share < need else "")
            + (
                f"; still learning when the {len(losses)} steps ran out ({first or 0:.0%} right at the start, the "
                f"loss still falling): a slow rate ({at}), not a defect it can see; raise [pilot] overfit_steps or "
                "overfit_lr to see it memorise"
                if slow
                else ""
            ),
            warn=slow,
        )
    if acc is None:
        input_matters(g, attempt, j["noise"], slow)
    in_range(g, attempt)
    failed = g.failures()
    if failed:
        g.message = (
            f"overfit failed: {'; '.join(c['name'] + ': ' + c['detail'] for c in failed)}. "
            f"A model that cannot memorise {n} fixed examples will not learn the full data set: check that "
            "its output depends on its input (pooling, masking), the labels, the loss, the learning rate "
            "and frozen parameters before paying for a long run. (Passing proves the mechanics, not generalisation.)"
        )


def input_matters(g: Gate, attempt: dict[str, Any], noise: float, slow: bool = False) -> None:
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
    ok = _reads_input(paired, noise)
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


def in_range(g: Gate, attempt: dict[str, Any]) -> None:
    """A loss over discrete targets that starts at or above 0 never goes below it: a negative value is impossible."""
    losses = [x for x in attempt["losses"] if math.isfinite(x)]
    name = "loss in range"
    if not attempt["discrete"]:
        g.not_applicable(
            name,
            "the batch has no integer targets (class or token ids), so the loss need not be a negative "
            "log-likelihood over a discrete distribution, and a negative value can be legitimate",
        )
        return
    if not losses:
        g.not_applicable(name, "no finite loss to read")
        return
    if losses[0] < 0:
        g.check(
            name,
            False,
            f"negative from the start ({losses[0]:.4g}) for a loss over integer targets: not a negative "
            "log-likelihood, or one over log-probabilities that are not normalised (scores or probabilities given "
            "where log_softmax belongs); if the objective is meant to go below 0, this is expected",
            warn=True,
        )
        return
    low = min(losses)
    step = losses.index(low) + 1
    ok = low >= -1e-6 * max(1.0, abs(losses[0]))
    g.check(
        name,
        ok,
        f"never below 0 (lowest {low:.4g}) for a loss over integer targets"
        if ok
        else f"the loss went negative ({low:.4g} at overfit step {step}, from {losses[0]:.4g}): a negative "
        "log-likelihood over discrete targets (cross-entropy, CTC) cannot be below 0, so this value is impossible: "
        "look for log-probabilities that are not normalised (a missing log_softmax), a sign or a reduction "
        "that divides by the wrong count, or lengths that do not match the targets",
    )


def _attempt(
    ctx: Context,
    examples: list[dict[str, Any]],
    mbs: list[list[dict[str, Any]]],
    lr: float,
    steps: int,
    need: float,
) -> dict[str, Any]:
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
    floor, discrete = blind_floor(tr, examples)
    first = accuracy(tr, examples)
    losses: list[float] = []
    bad_step = None
    acc: tuple[float, int, list[Any]] | None = None
    at = 0
    ceiling = min(2000, 10 * steps)
    step = 0
    while step < ceiling:
        step += 1
        loss = float(tr.accumulate(mbs, check_finite=False)["loss"])
        losses.append(loss)
        if not math.isfinite(loss):
            bad_step = step
            break
        if discrete and losses[0] >= 0 and loss < -1e-6 * max(1.0, losses[0]):
            break  # an impossible value: the finding is made (see in_range)
        norm = tr.apply(check_finite=False).get("grad_norm")
        if norm is None and tr.scaler is None:  # with fp16 the scaler skips such a step by design
            bad_step = step
            break
        if step % 10 and step != steps:
            continue
        j = judge(losses, floor)
        acc, at = accuracy(tr, examples), step
        if acc is not None and acc[0] >= need:
            break  # memorised
        if acc is None and j["end"] < j["threshold"] and _reads_input(paired_losses(tr, mbs), j["noise"]):
            break  # without predictions: below its threshold, and the output depends on the input
        if step >= steps and not still_learning(losses):
            break
    if bad_step is None and at != len(losses):
        acc = accuracy(tr, examples)  # after the last update
    paired = paired_losses(tr, mbs) if bad_step is None else None
    out = {"losses": losses, "bad_step": bad_step, "accuracy": acc, "floor": floor, "discrete": discrete}
    out["first_accuracy"] = first[0] if first is not None else None
    return {**out, "paired": paired}


@torch.no_grad()
def paired_losses(tr: Trainer, mbs: list[list[dict[str, Any]]]) -> tuple[float, float, str] | str:
    """(the fitted loss, the loss with each row's input paired with the next row's everything else, the keys moved),
    under one replayed RNG state; or why it cannot be measured. A model whose output ignores its input gives the
    same for both (a contrastive model collapsed to uniform scores, a pooled token that is the same in every row)."""
    key = tr.task.input_key
    fitted = shuffled = 0.0
    moved: list[str] = []
    for mb in mbs:
        batch = tr.collate(mb)
        x = batch.get(key)
        if not torch.is_tensor(x) or x.dim() == 0 or x.shape[0] < 2:
            return f"no batch[{key!r}] with two rows or more to pair with other rows (Task.input_key)"
        moved = [k for k, v in batch.items() if torch.is_tensor(v) and tuple(v.shape) == tuple(x.shape)]
        rest = [k for k, v in batch.items() if torch.is_tensor(v) and v.dim() and v.shape[0] == x.shape[0]]
        if not set(rest) - set(moved):
            return (
                f"every tensor of the batch is shaped like batch[{key!r}]: nothing else (a target, another view) "
                "to pair the input with"
            )
        start = rng_state()
        for rolled, into in ((False, "fitted"), (True, "shuffled")):
            b = dict(batch)
            if rolled:
                b.update({k: torch.roll(batch[k], 1, dims=0) for k in moved})
            set_rng_state(start)
            value, count = tr.loss_of(b)
            v = float(value) / float(count) if count is not None else float(value)
            if into == "fitted":
                fitted += v / len(mbs)
            else:
                shuffled += v / len(mbs)
    return fitted, shuffled, ", ".join(moved)


def _reads_input(paired: tuple[float, float, str] | str, noise: float) -> bool:
    """The fitted loss is clearly lower than with inputs paired to other rows (or that cannot be measured)."""
    if isinstance(paired, str):
        return True
    fitted, shuffled, _ = paired
    return shuffled - fitted > max(3 * noise, 0.05 * abs(fitted), 1e-6)


def still_learning(losses: list[float]) -> bool:
    """The last 20 steps' mean clearly below the 20 before: the loss is still falling (worth more steps)."""
    if len(losses) < 40:
        return True
    last, before = losses[-20:], losses[-40:-20]
    noise = statistics.pstdev(last)
    return statistics.fmean(last) < statistics.fmean(before) - max(noise / 2, 0.01 * abs(statistics.fmean(before)))


def trend_falls(losses: list[float]) -> bool:
    """Over the last half of the run (40 steps at least), the loss still falls: a least-squares slope more than
    three standard errors below zero, worth at least 0.5 % of the loss over that stretch (a converged loss creeping
    towards its floor is not learning; a slow, steady or noisy descent is)."""
    tail = losses[-max(40, len(losses) // 2) :]
    n = len(tail)
    if n < 40:
        return False
    xs = range(n)
    mx, my = (n - 1) / 2, statistics.fmean(tail)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, tail, strict=True)) / sxx
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, tail, strict=True)]
    se = math.sqrt(sum(r * r for r in resid) / max(n - 2, 1) / sxx)
    return slope < -3 * se and -slope * n >= 0.005 * abs(my)


@torch.no_grad()
def blind_floor(tr: Trainer, examples: list[dict[str, Any]]) -> tuple[float | None, bool]:
    """(the loss of a model that ignores its input on these examples: the entropy of their targets, in nats;
    whether the targets are integer ids). None when the targets are not class or token ids."""
    task = tr.task
    counts: dict[int, int] = {}
    for i in range(0, len(examples), tr.microbatch):
        lab = tr.collate(examples[i : i + tr.microbatch]).get(task.label_key)
        if not torch.is_tensor(lab) or lab.dtype.is_floating_point or lab.dtype == torch.bool or lab.dim() == 0:
            return None, False
        keep = lab != task.ignore_index
        if task.label_convention == "shift_in_loss" and lab.dim() >= 2:
            keep[:, 0] = False
        for v, c in zip(*torch.unique(lab[keep], return_counts=True), strict=True):
            counts[int(v)] = counts.get(int(v), 0) + int(c)
    total = sum(counts.values())
    if not total:
        return None, True
    return -sum(c / total * math.log(c / total) for c in counts.values()), True


def _round(x: float) -> float | None:
    return round(x, 5) if math.isfinite(x) else None


@torch.no_grad()
def accuracy(tr: Trainer, examples: list[dict[str, Any]]) -> tuple[float, int, list[Any]] | None:
    """(share of supervised targets predicted right, how many targets, ids with a wrong one); None: no predictions."""
    task = tr.task
    was = tr.model.training
    tr.model.eval()
    right = total = 0
    wrong: list[Any] = []
    try:
        for i in range(0, len(examples), tr.microbatch):
            part = examples[i : i + tr.microbatch]
            batch = tr.collate(part)
            lab = batch.get(task.label_key)
            if torch.is_tensor(lab) and lab.dtype.is_floating_point:
                return None  # real-valued targets: no prediction is "right"; the loss and the pairing decide
            pred = tr.predictions(batch)
            if pred is None or not torch.is_tensor(lab) or pred.numel() != lab.numel():
                return None
            pred = pred.reshape(lab.shape)
            keep = lab != task.ignore_index
            if task.label_convention == "shift_in_loss" and lab.dim() >= 2:
                keep[:, 0] = False  # nothing predicts the first label: the loss drops it too
            hit = (pred == lab) & keep
            right += int(hit.sum())
            total += int(keep.sum())
            ok = rows(hit | ~keep).all(1).tolist()
            wrong += [e.get("id") for e, o in zip(part, ok, strict=False) if not o]
    finally:
        tr.model.train(was)
    if total == 0:
        return None
    return right / total, total, wrong


def inputs(ctx: Context) -> dict[str, Any]:
    return {
        "examples": int(ctx.pilot_cfg.get("overfit_examples", 16)),
        "steps": int(ctx.pilot_cfg.get("overfit_steps", 200)),
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
    ),
    independent=True,
    inputs=inputs,
    doc="a fresh copy learns a tiny fixed subset",
)
