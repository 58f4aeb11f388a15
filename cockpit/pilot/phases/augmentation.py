"""Random augmentations must draw anew every epoch: a collate that re-seeds a global generator repeats them.

Cockpit calls the task's ``collate`` in the run's own process (the contract has no DataLoader and no worker
processes), so NumPy's generator forked unseeded into every worker cannot happen here: each draw comes from the
generators Cockpit seeds from the run's seed, and advances them. What can happen is a collate (or a transform it
calls) that seeds a global generator itself, ``np.random.seed(example_id)`` or ``torch.manual_seed(0)`` "for
reproducibility": every epoch then draws the same crops, flips, masks or noise for each batch, and everything drawn
after it (dropout, the next batch) restarts from that seed. Measured by collating one microbatch under two
different random states: a generator whose state after the call is the same whichever state it started from was
re-seeded by the call.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from ..context import Context
from ..datascan import collate
from ..gate import Gate
from ..rng import RngState, rng_state, set_rng_state

NAME = "augmentations differ across epochs"
IN_PROCESS = "Cockpit collates in the run's own process, so no DataLoader worker repeats another's draws"


def _streams(st: RngState) -> dict[str, Any]:
    out: dict[str, Any] = {"torch": st["torch"], "Python": st["python"]}
    if "numpy" in st:
        out["NumPy"] = (st["numpy"]["keys"], st["numpy"]["pos"])
    return out


def _same(a: Any, b: Any) -> bool:
    if torch.is_tensor(a) and torch.is_tensor(b):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _advance() -> None:
    """Move every global generator on, as the updates of an epoch would."""
    random.random()
    torch.rand(1)
    try:
        import numpy as np

        np.random.random()
    except ImportError:  # pragma: no cover
        pass


def epochs_differ(ctx: Context, g: Gate, examples: list[dict[str, Any]]) -> None:
    """Collate ``examples`` under two random states; name every global generator the call re-seeds."""
    if not examples:
        g.not_applicable(NAME, "no training examples to collate")
        return
    task, params = ctx.the_task, ctx.params
    start = rng_state()
    try:
        a = collate(task, params, examples)
        after_a = _streams(rng_state())
        set_rng_state(start)
        _advance()
        before_b = _streams(rng_state())
        b = collate(task, params, examples)
        after_b = _streams(rng_state())
    finally:
        set_rng_state(start)  # the run goes on from where it was
    before_a = _streams(start)
    reseeded = [s for s in after_a if not _same(before_a[s], before_b[s]) and _same(after_a[s], after_b[s])]
    random_keys = [k for k in a if torch.is_tensor(a[k]) and k in b and not _same(a[k], b[k])]
    if reseeded:
        which = " and ".join(f"{s}'s" for s in reseeded)
        g.check(
            NAME,
            False,
            f"the collate re-seeds {which} global generator on every call (its state after collating the same "
            f"{len(examples)} examples is identical whichever state it started from): every random crop, flip, "
            "mask or noise it draws repeats exactly for these examples in every epoch, and whatever is drawn after "
            "it (dropout, the next batch) restarts from that seed. Do not seed inside collate or a transform: "
            "Cockpit seeds every generator once from the run's seed; for per-example draws use a generator of "
            "its own seeded from (seed, epoch, example)",
        )
        return
    if random_keys:
        g.check(
            NAME,
            True,
            f"the collate draws {', '.join(random_keys)} from the seeded global generators, so each epoch draws "
            f"anew; {IN_PROCESS}",
        )
        return
    g.not_applicable(
        NAME,
        f"the collate draws nothing from the global generators (the same tensors under two random states), so "
        f"there is no augmentation to repeat; {IN_PROCESS}",
    )
