"""The loss at initialisation against what the objective implies (the forward gate).

Precondition: the loss has a form Cockpit recognises from the model's own output and the batch's targets
(:mod:`.objective`): the mean cross-entropy of the logits over class or token ids, or the mean squared error of
an output shaped like real-valued targets, or a multiple of either. Then the reference is what that form gives
for a fresh model: ln C for uniform predictions over C classes (beside the targets' entropy, what a model that
ignores its input reaches), the targets' variance for a model predicting their mean. A loss far above it (more
than twice) is a warning that says the excess in nats and the cause measured: a sum where a mean was meant (the
loss is N times the mean), logits at a wrong scale (their cross-entropy at unit spread is near ln C), an extra
term (the loss minus the form's own), a double softmax (the loss is the cross-entropy of ``softmax(logits)``).
Far below is a model that starts from learned weights, no defect. Without a recognised form, a classifier or a
generation task with a vocabulary is still compared with ln C, as declared; anything else is not applicable.
"""

from __future__ import annotations

import math

import torch

from ... import blame
from ... import events as ev
from ..context import Context
from ..gate import Gate
from ..task import Task
from ..usercode import user_int
from . import objective

NAME = "initial loss as the objective implies"
AT_INIT = "loss terms at init"  # lossterms.AT_INIT, named in the extra-term cause


def declared_classes(ctx: Context) -> tuple[int | None, str]:
    task = ctx.the_task
    if task.kind == "classification" and task.label_names:
        return len(task.label_names), "classes"
    if task.kind == "generation" and task.vocab_size:
        return user_int("vocab_size", task.vocab_size, ctx.params), "vocabulary"
    return None, ""


def check(
    ctx: Context,
    g: Gate,
    loss: float,
    batch: dict[str, object],
    logits: torch.Tensor | None,
    value: torch.Tensor,
    terms: list[str] | None = None,
) -> objective.Implied | None:
    """Record the check (see the module's docstring) for the first microbatch's mean loss (``value``: the same,
    still a tensor in the graph); returns the standard losses of the model's output it measured against."""
    im = objective.implied(ctx.the_task, logits, batch)
    rel = 2e-3 if ctx.trainer.precision == "fp32" else 3e-2
    if im is not None and im.ce is not None and im.classes:
        _cross_entropy(g, loss, im, rel, ctx.the_task, logits, batch, value, terms or [])
    elif im is not None and im.bce is not None and _binary(g, loss, im, rel, ctx.the_task.loss):
        pass
    elif im is not None and im.mse is not None and im.variance is not None and im.variance > 1e-12:
        _squared_error(g, loss, im, rel)
    else:
        classes, what = declared_classes(ctx)
        if classes and classes >= 2:
            _declared(g, loss, classes, what)
            return im
        g.not_applicable(
            NAME,
            "the loss has no form Cockpit recognises from the model's output and the targets (the mean "
            "cross-entropy of logits over class or token ids, the mean squared error of an output shaped like "
            "real-valued targets) and the task declares no classes or vocabulary, so nothing says what it should "
            "be at initialisation",
        )
    return im


def _record(g: Gate, loss: float, reference: float, what: str, form: str, **more: ev.JSON) -> float:
    ratio = loss / reference if reference > 0 else math.inf
    g.extra["initial_loss"] = {
        "loss": loss,
        "reference": reference,
        "what": what,
        "ratio": ratio,
        "excess": loss - reference,
        "form": form,
        **more,  # type: ignore[typeddict-item]
    }
    return ratio


def _cross_entropy(
    g: Gate,
    loss: float,
    im: objective.Implied,
    rel: float,
    task: Task,
    logits: torch.Tensor | None,
    batch: dict[str, object],
    value: torch.Tensor,
    terms: list[str],
) -> None:
    assert im.ce is not None and im.classes and im.ce_softmaxed is not None
    scale: float | None = None
    c = im.classes
    uniform = math.log(c)
    factor = objective.multiple(loss, im.ce, im, rel)
    if objective.close(loss, im.ce, rel):
        form = "the mean cross-entropy of the logits"
    elif factor is not None:
        form = f"{factor[0]:g} x the mean cross-entropy of the logits"
    elif objective.softmaxed(loss, im.ce, im.ce_softmaxed, rel / 10):
        form = "the cross-entropy of softmax(logits)"
    elif (found := objective.logit_scale(task, logits, batch, loss)) is not None and objective.gradient_is_ce(
        task, logits, batch, value, found
    ):
        scale = found  # the gradient on the logits is that scale's too: measured, not only a value that fits
        form = f"the mean cross-entropy of {scale:.3g} x the logits"
    else:
        form = f"the mean cross-entropy of the logits ({im.ce:.3f}) and {loss - im.ce:+.3f} more"
    ratio = _record(
        g, loss, uniform, "ln C", form, uniform=uniform, classes=c, entropy=im.entropy, ce=im.ce, spread=im.spread
    )
    head = (
        f"{loss:.3f} against ln {c} = {uniform:.3f} for uniform predictions over the {c} outputs "
        f"({ratio:.2f}x, {loss - uniform:+.3f} nats); the targets' entropy on this microbatch is {im.entropy:.3f} "
        f"(a model that ignores its input); the loss is {form}"
    )
    if ratio < 0.5:
        g.check(NAME, True, head + ": below uniform, the model starts from learned weights")
        return
    double = form.startswith("the cross-entropy of softmax")
    if ratio <= 2.0 and double:
        g.check(
            NAME,
            False,
            head + f": a double softmax: your loss equals the cross-entropy of softmax(logits) ({im.ce_softmaxed:.3f})"
            f", not of the logits ({im.ce:.3f}); cross_entropy applies log_softmax itself, so the loss can never go "
            f"below ln(e + {c} - 1) - 1 = {objective.double_softmax_floor(c):.3f} and its gradient flattens as "
            "the model learns: give cross_entropy the logits",
            warn=True,
        )
        return
    if ratio <= 2.0:
        g.check(NAME, True, head)
        return
    causes: list[str] = []
    if factor is not None:
        causes.append(
            f"a sum where a mean was meant: the loss is {factor[0]:g} x the mean cross-entropy {im.ce:.3f} "
            f"({factor[0]:g} = the {factor[1]}); return the mean (reduction='mean'), or (sum, count) so Cockpit "
            "and your loop divide by the count"
        )
    elif double:
        causes.append(
            "a double softmax: the loss equals the cross-entropy of softmax(logits); give cross_entropy the logits"
        )
    elif scale is not None:
        causes.append(
            f"logits scaled inside the loss: the loss is the cross-entropy of {scale:.3g} x the model's logits "
            f"(of the logits themselves: {im.ce:.3f}); a temperature divided where it should multiply, or a "
            "scale left in the loss: give cross_entropy the logits as the model returns them"
        )
    elif not objective.close(loss, im.ce, rel):
        causes.append(
            f"an extra term: {loss - im.ce:.3f} nats beyond the mean cross-entropy of the logits ({im.ce:.3f}); an "
            "auxiliary loss or regulariser with too large a weight, or a term added twice"
            + (f" (the terms the loss names: {', '.join(terms)}; see '{AT_INIT}')" if terms else "")
        )
    base = im.ce
    if base > 2 * uniform and im.ce_unit is not None and im.spread is not None and im.ce_unit <= 1.5 * uniform:
        causes.append(
            f"logits at a wrong scale: their spread across the {c} outputs is {im.spread:.3g} (a fresh output "
            f"layer gives about 1 or less) and rescaled to a spread of 1 their cross-entropy would be "
            f"{im.ce_unit:.3f}, near ln {c}: logits multiplied (a temperature below 1, a scale left in the head) "
            "or an output layer initialised too large"
        )
    elif base > 2 * uniform:
        causes.append(
            f"an over-confident start: the cross-entropy of the logits alone is {base:.3f}; check the output "
            "layer's size and initialisation"
        )
    g.check(NAME, False, head + ": far above uniform: " + "; ".join(causes), warn=True)


def _binary(g: Gate, loss: float, im: objective.Implied, rel: float, fn: object) -> bool:
    """Targets in [0, 1] and a loss that is the binary cross-entropy with logits of the model's output: recorded
    when the output is logits, a failure when it is a sigmoid's (a double sigmoid); False: not that form."""
    assert im.bce is not None and im.mean is not None
    if not objective.close(loss, im.bce, rel):
        return False
    ln2 = math.log(2.0)
    if not im.sigmoid:
        ratio = _record(g, loss, ln2, "ln 2", "the mean binary cross-entropy of the logits", bce=im.bce)
        g.check(
            NAME,
            True,
            f"{loss:.3f} against ln 2 = {ln2:.3f} for logits at 0 ({ratio:.2f}x); the loss is the mean binary "
            "cross-entropy of the logits",
        )
        return True
    _record(g, loss, ln2, "ln 2", "the binary cross-entropy with logits of a sigmoid's output", bce=im.bce)
    floor = objective.double_sigmoid_floor(im.mean)
    g.check(
        NAME,
        False,
        f"the model's output is a sigmoid's (probabilities) and your loss ({loss:.3f}) is the binary cross-entropy "
        "with logits of it: a double sigmoid"
        + (f" (the loss: {blame.defined_at(fn)})" if fn is not None else "")
        + ". binary_cross_entropy_with_logits (BCEWithLogitsLoss) applies a sigmoid of its own, so a positive "
        "target is at best scored as sigmoid(1) = 0.73 and a negative one as sigmoid(0) = 0.5: the loss cannot go "
        f"below {floor:.3f} on these targets, the negatives never train, and the gradient flattens. Remove the "
        "model's last sigmoid (apply it at prediction) or use binary_cross_entropy on the probabilities",
    )
    return True


def _squared_error(g: Gate, loss: float, im: objective.Implied, rel: float) -> None:
    assert im.mse is not None and im.variance is not None and im.mean is not None
    var = im.variance
    factor = objective.multiple(loss, im.mse, im, rel)
    if objective.close(loss, im.mse, rel):
        form = "the mean squared error of the output"
    elif factor is not None:
        form = f"{factor[0]:g} x the mean squared error of the output"
    else:
        return _declared_none(g, loss, im)
    ratio = _record(g, loss, var, "the targets' variance", form, mse=im.mse, mean=im.mean)
    head = (
        f"{loss:.4g} against the targets' variance {var:.4g} (the squared error of predicting their mean "
        f"{im.mean:.4g}; {ratio:.2f}x); the loss is {form}"
    )
    if ratio <= 2.0:
        g.check(NAME, True, head)
        return
    causes: list[str] = []
    if factor is not None:
        causes.append(
            f"a sum where a mean was meant: the loss is {factor[0]:g} x the mean squared error {im.mse:.4g} "
            f"({factor[0]:g} = the {factor[1]}); return the mean, or (sum, count)"
        )
    if im.mse > 2 * var:
        causes.append(
            f"the output starts far from the targets: the squared error alone is {im.mse:.4g} "
            f"(targets' mean {im.mean:.4g}, standard deviation {math.sqrt(var):.4g}); standardise the targets or "
            "start the output layer's bias at their mean"
        )
    g.check(NAME, False, head + ": far above it: " + "; ".join(causes), warn=True)


def _declared_none(g: Gate, loss: float, im: objective.Implied) -> None:
    g.not_applicable(
        NAME,
        f"the loss ({loss:.4g}) is neither the mean squared error of the output against the real-valued targets "
        f"({im.mse:.4g}) nor a multiple of it (a likelihood with a learned variance, a robust loss): no reference "
        "for its value at initialisation",
    )


def _declared(g: Gate, loss: float, classes: int, what: str) -> None:
    """No recognised form: the declared class count or vocabulary still says what uniform predictions give."""
    uniform = math.log(classes)
    ratio = _record(g, loss, uniform, "ln C", "not recognised", uniform=uniform, classes=classes)
    learned = ratio < 0.5
    ok = ratio <= 2.0
    g.check(
        NAME,
        ok,
        f"{loss:.3f} vs ln {classes} = {uniform:.3f} for uniform predictions over the {what} ({ratio:.2f}x, "
        f"{loss - uniform:+.3f} nats; the model's output does not line up with the targets, so the loss's form "
        "is not measured)"
        + (
            ": below uniform, the model starts from learned weights"
            if learned
            else ""
            if ok
            else ": far above uniform: an over-confident start; check the output layer's size and initialisation "
            "(logits too large), the loss's reduction and what it is averaged over"
        ),
        warn=True,
    )
