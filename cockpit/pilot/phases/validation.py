"""Validation: eval mode, no grad, the whole split with its longest batch first, complete and deterministic outputs."""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ... import blame
from ... import events as ev
from .. import carried, inspection
from ..context import Context
from ..gate import Gate, Phase
from ..predictions import PredictionRow, predict_pass
from ..rng import rng_state, set_rng_state


def run(ctx: Context, g: Gate) -> None:
    tr = ctx.trainer
    val = list(tr.splits["val"])
    length = tr.task.length
    if length is not None:
        val.sort(key=lambda e: length(e), reverse=True)  # the longest batch first
        g.inputs["longest"] = length(val[0]) if val else 0
    g.inputs.update({"examples": len(val), "eval_microbatch": tr.eval_microbatch})
    modes: list[bool] = []
    grad: list[bool] = []

    def spy(module: Any, args: Any) -> None:
        modes.append(module.training)
        grad.append(torch.is_grad_enabled())

    training_in_eval: set[str] = set()
    names = {id(m): n or type(m).__name__ for n, m in tr.model.named_modules()}

    def still_training(module: Any, args: Any) -> None:
        if module.training and id(module) in names:
            training_in_eval.add(names[id(module)])

    hook = tr.model.register_forward_pre_hook(spy)
    every = torch.nn.modules.module.register_module_forward_pre_hook(still_training)
    try:
        out = tr.evaluate("val", val)
        again = tr.evaluate("val", val[: tr.eval_microbatch])
        first = tr.evaluate("val", val[: tr.eval_microbatch])
    finally:
        hook.remove()
        every.remove()
    g.check(
        "eval mode",
        bool(modes) and not any(modes),
        "model.eval() during validation" if not any(modes) else "model was in training mode",
    )
    g.check("no grad", not any(grad), "torch.no_grad()" if not any(grad) else "gradients were recorded")
    ids = out["ids"]
    want = [e["id"] for e in val]
    dup = len(ids) - len(set(ids))
    missing = set(want) - set(ids)
    g.check(
        "complete outputs",
        out["n"] == len(val) and not missing and not dup,
        f"{out['n']}/{len(val)} examples evaluated"
        + (
            f", but the batches' ids name {len(ids)} ({len(set(ids))} distinct): the collate returns ids that are "
            f"not one per example ({blame.defined_at(tr.task.collate)}), so the predictions cannot be told apart"
            if len(ids) != out["n"]
            else ""
        )
        + (f"; missing {sorted(map(str, missing))[:4]}" if missing else "")
        + (f"; {dup} duplicated" if dup else ""),
    )
    g.check("finite loss", math.isfinite(out["loss"]), f"val loss {out['loss']:.4f}")
    deterministic(ctx, g, val[: tr.eval_microbatch], first["loss"], again["loss"], training_in_eval)
    g.check("training mode restored", tr.model.training, "back in train mode")
    # the prediction pass every validation of a training run makes, timed here so the first one holds no surprise
    t0 = time.perf_counter()
    metrics, rows = predict_pass(tr)
    g.extra["predictions"] = {"rows": len(rows), "seconds": round(time.perf_counter() - t0, 4), "metrics": metrics}
    generated = [r for r in rows if "generated" in r]
    if generated:
        g.extra["predictions"]["generated"] = len(generated)
        g.extra["generated"] = [_shown(r) for r in generated[:3]]
        if ctx.rank == 0:
            inspection.add_generated(ctx)  # the data view shows it beside the target
    g.extra["val_loss"] = out["loss"]
    ctx.emit(
        ev.EVAL,
        step=tr.step,
        loss=ev.finite_or_none(out["loss"]),
        metrics={k: ev.finite_or_none(v) for k, v in metrics.items()},
    )


def deterministic(
    ctx: Context, g: Gate, batch: list[Any], first: float, again: float, training_in_eval: set[str]
) -> None:
    """The same batch evaluated twice gives the same loss; where it does not, whose randomness it is, measured.

    Replaying the RNG state (Python, NumPy, torch, CUDA) before each of two evaluations tells seeded randomness
    from randomness the run's seed does not control; a hook on the model tells randomness drawn inside its
    forward in eval mode (dropout left on: a defect) from randomness the objective draws around it (the noise
    and timesteps of a diffusion loss: deterministic given the RNG, so the check does not apply).
    """
    name = "deterministic"
    if first == again:
        g.check(name, True, "same loss twice (dropout off)")
        return
    tr = ctx.trainer
    inside: list[bool] = []
    entry: list[list[torch.Tensor]] = []

    def before(module: Any, args: Any) -> None:
        entry.append(_generators())

    def after(module: Any, args: Any, output: Any) -> None:
        inside.append(not _same(entry.pop(), _generators()))

    start = rng_state()
    h1 = tr.model.register_forward_pre_hook(before)
    h2 = tr.model.register_forward_hook(after)
    draws = RandomCalls()
    try:
        with draws:
            a = tr.evaluate("val", batch)["loss"]
        set_rng_state(start)
        b = tr.evaluate("val", batch)["loss"]
    finally:
        h1.remove()
        h2.remove()
    g.extra["determinism"] = {
        "twice": [first, again],
        "replayed": [a, b],
        "model_draws": any(inside),
        "dropout": sorted(draws.dropout),
        "sampling": sorted(draws.sampling),
    }
    differ = f"two evaluations of the same batch differ ({first:.6g} vs {again:.6g})"
    state = carried.changed_by(tr.model, lambda: tr.evaluate("val", batch)) if a != b else []
    if state:
        g.extra["determinism"]["carried"] = state[:8]
        g.check(
            name,
            False,
            f"{differ}, and replaying the RNG state does not reproduce it: the model carries state from one call "
            f"to the next ({', '.join(state[:4])} change at every forward: a hidden state, a cache, a counter), "
            "so a validation loss depends on what was evaluated before it; reset that state at the start of "
            "each evaluation (expected for a model that carries state, but its figures are then not comparable)",
            warn=True,
        )
    elif a != b:
        g.check(
            name,
            False,
            f"{differ}, and replaying the RNG state (Python, NumPy, torch, CUDA) before each does not reproduce "
            f"it ({a:.6g} vs {b:.6g}): randomness the run's seed does not control (a generator of its own, such "
            "as numpy.random.default_rng() or random.Random() seeded from the clock, or a non-deterministic "
            "kernel); validation figures then move between runs, and no resume or replay can be compared. Draw "
            "from torch's generator (or one seeded from it)",
        )
    elif training_in_eval:
        g.check(
            name,
            False,
            f"{differ}: modules left in training mode inside eval(): {', '.join(sorted(training_in_eval)[:4])}; "
            "validation figures then move between runs for no reason",
        )
    elif any(inside) and draws.sampling and not draws.dropout:
        g.not_applicable(
            name,
            f"{differ}: the model's forward samples in eval mode ({', '.join(sorted(draws.sampling)[:3])}; no "
            "dropout is on and no module is in training mode): a stochastic model by design (a VAE's "
            f"reparameterisation, a sampling layer), and replaying the RNG state reproduces the loss exactly "
            f"({a:.6g} twice), so it is deterministic given the RNG and the resume and export replay compare under "
            "the same RNG state; to compare validation losses across runs, evaluate under a fixed seed",
        )
    elif any(inside):
        g.check(
            name,
            False,
            f"{differ}: no module is in training mode, but the model's forward draws random numbers in eval mode "
            + (
                f"({', '.join(sorted(draws.dropout)[:3])}: dropout left on)"
                if draws.dropout
                else "(functional dropout with training=True, or a random kernel Cockpit cannot name)"
            )
            + "; validation figures then move between runs for no reason",
        )
    else:
        g.not_applicable(
            name,
            f"the objective draws random numbers outside the model (noise, timesteps, masking) from the run's "
            f"seeded generators: {differ}, but replaying the RNG state reproduces the loss exactly ({a:.6g} twice), "
            "so it is deterministic given the RNG, and the resume and export replay compare under the same RNG "
            "state; to compare validation losses across runs, evaluate under a fixed seed",
        )


DROPOUTS = ("dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d")
SAMPLERS = frozenset(
    [
        "rand",
        "randn",
        "rand_like",
        "randn_like",
        "randint",
        "randint_like",
        "normal",
        "normal_",
        "uniform_",
        "multinomial",
        "poisson",
        "exponential_",
        "geometric_",
        "log_normal_",
        "cauchy_",
        "randperm",
        "gumbel_softmax",
    ]
)


class RandomCalls(TorchFunctionMode):
    """The random torch functions a forward calls: dropout that is on (``training=True``, and ``bernoulli``), and
    sampling (``randn_like``, ``normal``, ``multinomial``...), by name, as called."""

    def __init__(self) -> None:
        super().__init__()
        self.dropout: set[str] = set()
        self.sampling: set[str] = set()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in DROPOUTS:
            on = kwargs.get("training", args[2] if len(args) > 2 else True)
            if on and float(kwargs.get("p", args[1] if len(args) > 1 else 0.5)) > 0:
                self.dropout.add(f"{name}(training=True)")
        elif name.startswith("bernoulli"):
            self.dropout.add(name)
        elif name in SAMPLERS:
            self.sampling.add(name)
        return func(*args, **kwargs)


def _generators() -> list[torch.Tensor]:
    states = [torch.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states += list(torch.cuda.get_rng_state_all())
    return states


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


PHASE = Phase(
    "validation",
    run,
    remedy="separate validation settings from training's: eval mode, no grad, its own microbatch",
    checks=("eval mode", "no grad", "complete outputs", "finite loss", "deterministic", "training mode restored"),
    doc="eval mode, no grad, whole split, complete outputs",
)


def _shown(r: PredictionRow) -> dict[str, ev.JSON]:
    """A generated row as the gate shows it: its id, input, target and generated text, those it has."""
    picked = {"id": r.get("id"), "input": r.get("input"), "target": r.get("target"), "generated": r.get("generated")}
    return {k: v for k, v in picked.items() if v is not None}
