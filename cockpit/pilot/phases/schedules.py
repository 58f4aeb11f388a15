"""The learning-rate schedule a task hands the pilot, measured (TrainCheck's kind): it advances once per update,
drives this optimizer, and spans the run's updates (replayed apart from the run, on a stand-in optimizer, from the
state the schedule started in). The update gates (:mod:`.updates`) call these around the pilot's updates; the
optimizer's other invariants are in :mod:`.optimizing`.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ... import arithmetic
from ..context import Context
from ..gate import Gate


def schedule_count(tr: Any) -> int | None:
    """How many times the scheduler has stepped, where it keeps a count (torch's ``last_epoch``)."""
    v = getattr(tr.scheduler, "last_epoch", None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _lrs(optimizer: Any) -> list[float]:
    return [float(gr.get("lr", 0.0)) for gr in optimizer.param_groups]


def schedule_steps(ctx: Context, g: Gate, before: int | None, updates: int) -> None:
    """The scheduler advanced once per update over ``updates`` updates, and it drives this optimizer.

    Cockpit steps the scheduler once per update. A scheduler also stepped elsewhere (in the loss, once per
    microbatch, as a loop that stepped it per batch did) runs its schedule that many times faster than the run;
    one built over another optimizer moves a learning rate nothing uses.
    """
    tr = ctx.trainer
    name = "schedule steps once per update"
    sched = tr.scheduler
    after = schedule_count(tr)
    drives = getattr(sched, "optimizer", None)
    if drives is not None and drives is not tr.optimizer:
        g.check(
            name,
            False,
            f"{tr.scheduler_source} drives another optimizer than the one that steps the model "
            f"({type(drives).__name__}, not {tr.optimizer_source}): its schedule moves a learning rate nothing "
            f"uses, and the run trains at a constant {_lrs(tr.optimizer)[0]:g}. Build the scheduler over the "
            "optimizer Task.scheduler receives",
        )
        return
    if before is None or after is None:
        g.not_applicable(name, f"{tr.scheduler_source} keeps no step count (last_epoch) to read")
        return
    n = after - before
    lr = _lrs(tr.optimizer)
    said = getattr(sched, "get_last_lr", None)
    told = None
    if callable(said):
        try:
            told = [float(v) for v in said()]
        except Exception:  # a scheduler that has not stepped yet, or keeps no last rate
            told = None
    if n == updates:
        if (
            told is not None
            and len(told) == len(lr)
            and not all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) for a, b in zip(told, lr, strict=True))
        ):
            g.check(
                name,
                False,
                f"{tr.scheduler_source} says the learning rate is {told[0]:g} but the optimizer steps at {lr[0]:g}: "
                "something sets the groups' lr after the scheduler (the optimizer's step, or the loss); let the "
                "scheduler alone set it",
            )
            return
        g.check(name, True, f"advanced {n} times in {updates} updates ({tr.scheduler_source}; lr now {lr[0]:g})")
        return
    per = n / max(updates, 1)
    acc = tr.accumulation
    cause = ""
    if n > updates:
        if n == updates * (acc + 1) or n == updates * acc:
            cause = (
                f" ({per:g} per update at accumulation {acc}: it is stepped once per microbatch, in the loss or "
                "the model's forward, besides Cockpit's step after each update)"
            )
        cause += (
            f": the schedule runs {per:g}x faster than the run, so its warm-up and decay end after "
            f"{1 / per:.0%} of the updates. Step it only where Cockpit does, once per update: remove the other "
            "call to scheduler.step()"
        )
    else:
        cause = (
            ": its step() does not advance it, so the learning rate never follows the schedule; "
            "return a scheduler whose step() moves it on"
        )
    g.check(name, False, f"{tr.scheduler_source} advanced {n} times in {updates} updates{cause}")


class _StandIn:
    """An optimizer in name only: the groups' hyperparameters without their tensors, for a schedule's replay."""

    def __init__(self, groups: list[dict[str, Any]]):
        self.param_groups = groups
        self.defaults: dict[str, Any] = {}
        self.state: dict[Any, Any] = {}

    def step(self, closure: Any = None) -> None:
        return None


REPLAY_STEPS = 50_000  # a schedule stepped one update at a time is replayed this far at most
REPLAY_SECONDS = 3.0


def planned_updates(ctx: Context) -> int | None:
    """The run's updates, as a training run of this variant resolves its budget."""
    tr = ctx.trainer
    plan_params = dict(ctx.params)
    plan_params["dataset_size"] = ctx.params.get("dataset_size") or len(tr.splits["train"])
    try:
        return int(arithmetic.budget_from(arithmetic.plan_from(plan_params), plan_params).updates)
    except (ValueError, ZeroDivisionError):
        return None


@dataclass
class Replay:
    """The learning rate of every group at each replayed update (``at``: the update indices)."""

    at: list[int] = field(default_factory=list)
    lrs: list[list[float]] = field(default_factory=list)


def replay_schedule(tr: Any, until: int) -> Replay | str:
    """The schedule's learning rates from its start for ``until`` updates, without touching the run's scheduler
    or optimizer: a LambdaLR is evaluated from its functions, any other is deep-copied over a stand-in optimizer,
    loaded with the state it started in, and stepped. A string says why it could not be replayed."""
    sched, start = tr.scheduler, tr.scheduler_start
    if start is None:
        return "its state at the start was not readable (state_dict)"
    lambdas = getattr(sched, "lr_lambdas", None)
    base = getattr(sched, "base_lrs", None)
    out = Replay()
    if isinstance(sched, torch.optim.lr_scheduler.LambdaLR) and isinstance(lambdas, list) and isinstance(base, list):
        fns: list[Callable[[int], float]] = list(lambdas)
        stride = max(1, until // 200_000)
        try:
            for t in range(0, until, stride):
                out.at.append(t)
                out.lrs.append([float(b) * float(f(t)) for b, f in zip(base, fns, strict=True)])
        except Exception as exc:
            return f"its lr_lambda raised {type(exc).__name__} at update {out.at[-1]}"
        return out
    if until > REPLAY_STEPS:
        return f"the run's {until:,} updates are more than the {REPLAY_STEPS:,} a stepped replay takes"
    first = start.get("_last_lr")
    if not isinstance(first, list) or len(first) != len(tr.optimizer.param_groups):
        return "its starting state has no learning rate per group (_last_lr)"
    groups = [
        {**{k: v for k, v in gr.items() if k != "params"}, "params": [], "lr": float(first[i])}
        for i, gr in enumerate(tr.optimizer.param_groups)
    ]
    stand = _StandIn(groups)
    t0 = time.perf_counter()
    try:
        twin = copy.deepcopy(sched, memo={id(tr.optimizer): stand})
        twin.load_state_dict(copy.deepcopy(start))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for t in range(until):
                out.at.append(t)
                out.lrs.append([float(gr["lr"]) for gr in stand.param_groups])
                twin.step()
                if time.perf_counter() - t0 > REPLAY_SECONDS:
                    return f"replaying it took over {REPLAY_SECONDS:g} s at update {t:,}"
    except Exception as exc:
        return f"a copy of it could not be stepped apart from the run ({type(exc).__name__}: {exc})"
    return out


def schedule_span(ctx: Context, g: Gate) -> None:
    """The task's schedule spans the run's updates: it does not take the learning rate to 0 with many updates
    left (they would train nothing), nor end far after the run (its decay never happens).

    Precondition: the task hands a scheduler (Cockpit's own is built over the run's updates), its starting state
    was readable, and the run's budget resolves to a number of updates.
    """
    tr = ctx.trainer
    name = "schedule spans the run"
    if tr.task.scheduler is None:
        g.not_applicable(name, f"{tr.scheduler_source} is built over the run's updates from [training]")
        return
    total = planned_updates(ctx)
    if not total or total < 2:
        g.not_applicable(name, "the run's budget does not resolve to a number of updates")
        return
    acc = max(1, tr.accumulation)
    window = max(2 * total, total * acc * max(1, tr.world)) + 1
    got = replay_schedule(tr, window)
    if isinstance(got, str):
        g.not_applicable(name, f"{tr.scheduler_source} could not be replayed: {got}")
        return
    tops = [max(v) for v in got.lrs]
    inside = [v for t, v in zip(got.at, tops, strict=True) if t < total]
    peak = max(inside, default=0.0)
    if peak <= 0:
        g.check(
            name,
            False,
            f"{tr.scheduler_source} keeps the learning rate at 0 for all of the run's {total:,} updates: "
            "nothing trains; check its lr_lambda and warm-up",
        )
        return
    tiny = 1e-12 * peak
    zero_from = None  # the update from which the rate stays at 0 to the run's end
    for t, v in zip(reversed(got.at), reversed(tops), strict=True):
        if t >= total:
            continue
        if v > tiny:
            break
        zero_from = t
    g.extra["schedule"] = {"updates": total, "peak": peak, "zero_from": zero_from}
    # A cyclic schedule (cosine annealing with a short period, restarts) touches 0 inside the run and rises again:
    # its zeros after the run are no horizon.
    cyclic = zero_from is None and any(0 < t < total and v <= tiny for t, v in zip(got.at, tops, strict=True))
    last = inside[-1]
    if zero_from is not None and total - zero_from >= max(2, 0.05 * total):
        share = (total - zero_from) / total
        hint = (
            f"; {total:,} / {zero_from:,} = {total / max(zero_from, 1):.2g}, the accumulation of {acc}: it counts "
            "examples or microbatches where the run counts updates"
            if acc > 1 and abs(total / max(zero_from, 1) - acc) < 0.1 * acc
            else ""
        )
        g.check(
            name,
            False,
            f"{tr.scheduler_source} takes the learning rate to 0 at update {zero_from:,} of the run's {total:,}: "
            f"the last {total - zero_from:,} updates ({share:.0%} of the run) change nothing{hint}. Build it over "
            "the run's updates (params' updates, or epochs x examples / (microbatch x accumulation x ranks))",
        )
        return
    ends = None if cyclic else next((t for t, v in zip(got.at, tops, strict=True) if t >= total and v <= tiny), None)
    if ends is not None and ends > 1.1 * total:
        hint = (
            f" ({ends:,} = {ends / total:.2g} x {total:,}, the accumulation of {acc}: its horizon counts "
            "microbatches where the run counts updates)"
            if acc > 1 and abs(ends / total - acc) < 0.1 * acc
            else ""
        )
        g.check(
            name,
            False,
            f"{tr.scheduler_source} reaches 0 only at update {ends:,}, after the run's {total:,}{hint}: the run ends "
            f"at {last / peak:.0%} of its peak rate, so the decay it plans never happens. Build it over the run's "
            "updates",
            warn=True,
        )
        return
    g.check(
        name,
        True,
        f"over the run's {total:,} updates the rate starts at {tops[0]:g}, peaks at {peak:g} and ends at {last:g}",
    )
