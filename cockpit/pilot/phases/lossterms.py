"""Each loss term on its own: at initialisation (the forward gate) and after the overfit.

Precondition: the loss or the model's output exposes named terms beside the total (a dict of losses, a
Hugging Face output's ``aux_loss``, a returned ``(loss, terms)``: :func:`cockpit.pilot.outputs.terms_of`).
Each term's part of the total is measured where it can be: the terms themselves when they add up to the total,
else, with one term and a loss whose main objective Cockpit recognises (the cross-entropy of the logits, a
squared error: :mod:`.objective`), the total less that objective (so a weight such as a router's
``aux_loss_coef`` is measured, not read from a config). Named, as warnings with the figures:

- a term that does not require grad while the loss does: it adds to the loss but no parameter is trained by it
  (computed on detached tensors, or through ``.item()``);
- the terms beyond the main objective holding more than half of the loss at init: their gradient drowns the
  objective's (a coefficient too large); after a fit the objective is near its floor, so shares then say nothing;
- after the overfit, a term holding a tenth of the loss or more at the start that did not fall.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ... import events as ev
from ..gate import Gate
from ..outputs import LossOut
from . import objective
from .overfitfloor import Reading

AT_INIT = "loss terms at init"
FALL = "each loss term falls"
NONE = (
    "the loss and the model's output expose no named terms beside the total (a dict of losses, aux_loss on a "
    "Hugging Face output, a returned (loss, terms)), so there is no term to read on its own"
)


@dataclass(frozen=True)
class Parts:
    """Each term's part of the total where measured (name -> contribution), the main objective's part, and how."""

    parts: dict[str, float]
    main: float | None
    how: str


def parts_of(total: float, terms: dict[str, float], main: float | None) -> Parts:
    """How much of ``total`` each term holds (see the module's docstring); empty where it cannot be measured."""
    if not terms:
        return Parts({}, main, "")
    s = sum(terms.values())
    if objective.close(s, total, 0.02):
        named_main = [k for k, v in terms.items() if main is not None and objective.close(v, main, 0.02)]
        m = terms[named_main[0]] if named_main else None
        return Parts(dict(terms), m, "the terms add up to the loss")
    if main is not None and len(terms) == 1 and not objective.close(total, main, 1e-3):
        (name, value), rest = next(iter(terms.items())), total - main
        weight = f", a weight of {rest / value:.3g} on it" if value else ""
        return Parts({name: rest}, main, f"the loss less its objective ({main:.4g}){weight}")
    return Parts({}, main, "")


def _figures(total: float, terms: dict[str, float], p: Parts) -> str:
    out = []
    for k, v in terms.items():
        part = p.parts.get(k)
        share = f", {part / total:.0%} of the loss" if part is not None and total else ""
        out.append(f"{k} {v:.4g}{share}")
    return "; ".join(out)


def aux_share(total: float, p: Parts) -> tuple[float, list[str]] | None:
    """The share of the total beyond the main objective, and the terms that hold it; None if not measured."""
    if p.main is None or not p.parts or not total or total <= 0:
        return None
    aux = {k: v for k, v in p.parts.items() if not objective.close(v, p.main, 0.02)}
    if not aux:
        return None
    return sum(aux.values()) / total, sorted(aux, key=lambda k: -aux[k])


def at_init(g: Gate, lo: LossOut, total: float, main: float | None, where: str = "") -> None:
    """The check :data:`AT_INIT` on the first microbatch's loss (a mean) and its terms; ``where`` names the code
    that returns them (the task's loss, or the model's forward for a Hugging Face output's aux_loss)."""
    if not lo.terms:
        g.not_applicable(AT_INIT, NONE)
        return
    terms = {k: float(v.detach().float()) for k, v in lo.terms.items()}
    finite = {k: v for k, v in terms.items() if math.isfinite(v)}
    p = parts_of(total, finite, main)
    record: dict[str, ev.JSON] = {
        "total": total,
        "main": p.main,
        "how": p.how,
        "init": {k: {"value": v, "part": p.parts.get(k)} for k, v in terms.items()},
    }
    g.extra["loss_terms"] = record
    head = f"loss {total:.4g}: {_figures(total, terms, p)}" + (f" ({p.how})" if p.how else "")
    problems: list[str] = []
    broken = [k for k, v in terms.items() if not math.isfinite(v)]
    if broken:  # the total is finite (the forward gate stopped before this otherwise): the term is left out of it
        nan = any(math.isnan(terms[k]) for k in broken)
        words = (
            f"{', '.join(broken)} {'is' if len(broken) == 1 else 'are'} {'NaN' if nan else 'infinite'} at init while "
            f"the loss is {total:.4g}: {'it is' if len(broken) == 1 else 'they are'} not in the total, so training "
            "goes on while every logged value of it says nothing (and adding it to the loss would end the run); "
            "find where it divides by zero, takes the log of 0 or multiplies by NaN"
            + (f", in {where}" if where else "")
        )
        if nan:  # a NaN is always a mistake; an infinity may be a perplexity past float32's range: a warning
            g.check(AT_INIT, False, head + ": " + words)
            return
        problems.append(words)
    if lo.value.requires_grad:
        detached = [k for k, v in lo.terms.items() if not v.requires_grad]
        if detached:
            problems.append(
                f"{', '.join(detached)} does not require grad while the loss does: it adds to the loss but no "
                "parameter is trained by it (computed on detached tensors, through .item() or under no_grad); "
                "compute it from the graph, or leave it out of the loss and log it"
            )
    share = aux_share(total, p)
    if share is not None and share[0] > 0.5:
        problems.append(
            f"{', '.join(share[1])} {'holds' if len(share[1]) == 1 else 'hold'} {share[0]:.0%} of the loss against {p.main:.4g} for the objective "
            "itself: its gradient drowns the objective's; lower its coefficient (a router's aux_loss_coef, a "
            "regulariser's weight) so the objective leads"
        )
    if problems:
        g.check(AT_INIT, False, head + ": " + "; ".join(problems), warn=True)
        return
    g.check(AT_INIT, True, head)


def after_fit(g: Gate, before: Reading | None, after: Reading | None) -> None:
    """The check :data:`FALL`: each term before the overfit's first update and after its last."""
    if before is None or not before.terms:
        g.not_applicable(FALL, NONE)
        return
    if after is None:
        g.not_applicable(FALL, "the fit did not end with a finite loss, so its terms were not read after it")
        return
    p0 = parts_of(before.loss, before.terms, before.main)
    rows, stuck = [], []
    for k, v0 in before.terms.items():
        v1 = after.terms.get(k)
        if v1 is None:
            continue
        part = p0.parts.get(k)
        share = part / before.loss if part is not None and before.loss > 0 else None
        rows.append(f"{k} {v0:.4g} -> {v1:.4g}" + (f" ({share:.0%} of the loss at the start)" if share else ""))
        big = share is None or share >= 0.1
        if big and v1 >= v0 - 0.05 * abs(v0):
            stuck.append((k, v0, v1))
    g.extra["loss_terms"] = {
        "total": [before.loss, after.loss],
        "terms": {k: [v, after.terms.get(k)] for k, v in before.terms.items()},
    }
    head = f"over the fit, loss {before.loss:.4g} -> {after.loss:.4g}: " + "; ".join(rows)
    problems = [
        f"{k} did not fall ({v0:.4g} -> {v1:.4g}) while the fit lowered the loss through the other terms: a term "
        "meant to be minimised is then not trained by the loss (detached, computed on a frozen part, its sign or "
        "weight wrong); a term already at its floor (a balancing loss at perfect balance) or a regulariser traded "
        "against the objective does not, which is expected"
        for k, v0, v1 in stuck
    ]
    if problems:
        g.check(FALL, False, head + ": " + "; ".join(problems), warn=True)
        return
    g.check(FALL, True, head)
