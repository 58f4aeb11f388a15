"""The run's seed reaches the model (the forward gate): ``build_model`` leaves torch's generator as the run seeded it.

Cockpit seeds each run with its own seed before ``build_model``. A ``torch.manual_seed(42)`` in it (a script's
``set_seed(42)``, Lightning's ``seed_everything(42)``) reseeds torch's generator for everything after it: the
weights it initialises next, every dropout mask and every random draw of training. Every seed of the campaign then
trains the same run, and the spread its seeds show measures nothing. Read from the generator itself: its initial
seed when ``build_model`` returns (``torch.initial_seed()``) against the run's; a reseed undone before returning
(``torch.random.fork_rng()`` around a teacher built from a fixed seed) passes. The line that seeded is named from a
watch on ``torch.manual_seed`` where the call went through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import blame

NAME = "the run's seed reaches the model"


@dataclass
class Seeded:
    seed: int | None = None  # torch's initial seed as the run set it, before build_model
    left: int | None = None  # torch's initial seed when build_model returned
    calls: list[tuple[int, str]] = field(default_factory=list)  # each torch.manual_seed(value) and the user's line


@contextmanager
def watched() -> Iterator[Seeded]:
    """Watch what the block does to torch's generator (``torch.manual_seed`` wrapped, then restored)."""
    out = Seeded(seed=torch.initial_seed())
    in_torch, in_random = torch.manual_seed, torch.random.manual_seed

    def manual_seed(seed: Any) -> Any:
        result = in_random(seed)  # torch's own error for a seed it refuses, raised in the user's call
        out.calls.append((torch.initial_seed(), blame.calling_line(2)))  # the seed as the generator holds it
        return result

    torch.manual_seed = torch.random.manual_seed = manual_seed
    try:
        yield out
    finally:
        torch.manual_seed, torch.random.manual_seed = in_torch, in_random
        out.left = torch.initial_seed()


def judge(s: Seeded, build_model: str) -> tuple[str, str]:
    """(verdict, words) of :data:`NAME`; ``build_model`` names the task's function."""
    if s.seed is None or s.left is None:
        return "na", "build_model was not watched"
    if s.left == s.seed:
        undone = [f"{v} ({w})" if w else str(v) for v, w in s.calls if v != s.seed]
        return "pass", f"torch's generator holds the run's seed ({s.seed}) when build_model returns" + (
            f"; it was seeded with {', '.join(undone[:2])} inside and restored after" if undone else ""
        )
    line = next((w for v, w in reversed(s.calls) if v == s.left and w), "") or build_model
    return "fail", (
        f"{build_model} left torch's random generator seeded with {s.left} (at {line}), not the run's seed "
        f"{s.seed}: every weight initialised after that line, every dropout mask and every random draw of training "
        "is the same in every seed of the campaign, so the spread of its seeds measures nothing. Leave the seeding "
        "to Cockpit (each run is seeded with its own), or put what must stay fixed under torch.random.fork_rng()"
    )
