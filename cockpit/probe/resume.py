"""The resume gate: the script started again from its own checkpoint, compared with the uninterrupted one. No torch.

The uninterrupted script went on for ``compare_steps`` steps after its checkpoint; the resumed one
runs as many. They must agree: the resumed process loads a file the first one saved, its optimizer
starts at the step after the checkpoint (for optimizers that count their steps, as Adam does), its
learning rate and its next losses are those of the uninterrupted script at the same steps.
"""

from __future__ import annotations

import math

from .. import events as ev
from ..pilot.gate import Gate
from . import phases as ph
from .judge import ProbeGate, Watched


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def same(a: float, b: float, exact: bool) -> bool:
    return a == b if exact else abs(a - b) <= 1e-5 * max(1.0, abs(b))


def gate(first: Watched, second: Watched, compare_steps: int, exact: bool) -> Gate:
    """Checks of the resumed process against the uninterrupted one. ``exact``: the script ran on the CPU
    (bit-identical losses expected); on a GPU, kernels are not bit-deterministic (1e-5 relative)."""
    saves = list((first.exit.get("saves") if first.exit else None) or [])
    saved_files = {f for s in saves for f in s.get("files") or []}
    last = saves[-1]["step"] if saves else None
    g = Gate(ph.RESUME, {"command": " ".join(second.argv)[:200], "from_step": last, "compare_steps": compare_steps})
    loaded = list((second.exit.get("loaded") if second.exit else None) or [])
    steps = list(second.steps)
    pid = second.hello.get("pid") if second.hello else None
    g.check(
        "new process",
        True,
        f"pid {pid}, {len(steps)} step{'s' if len(steps) != 1 else ''} after the restart",
    )
    from_ck = [f for f in loaded if f in saved_files]
    g.check(
        "checkpoint loaded",
        bool(from_ck),
        f"loaded {_files(from_ck)}"
        if from_ck
        else f"loaded none of the files the script saved ({_files(sorted(saved_files))})"
        + (f"; it loaded {_files(loaded)}" if loaded else ", nothing with torch.load or safetensors")
        + ": is the resume command wired to the checkpoint?",
    )
    before = {int(k): s for s in first.steps if (k := _num(s.get("opt_step"))) is not None}
    counted = {int(s["step"]): s for s in first.steps if isinstance(s.get("step"), int)}
    if not steps:
        g.fail("steps after the restart", "the resumed script took no optimizer step")
        return g
    k0 = _num(steps[0].get("opt_step"))
    if k0 is not None and before:
        want = {s["step"] + 1 for s in saves}
        restored = int(k0) in want
        g.check(
            "step restored",
            restored,
            f"the first step after the restart is step {int(k0)} (checkpoints after step "
            f"{', '.join(str(s['step']) for s in saves)})"
            + ("" if restored else ": the optimizer's state (its step count) was not restored"),
        )
        if restored:
            pairs = [(s, before.get(int(k))) for s in steps if (k := _num(s.get("opt_step"))) is not None]
        else:  # compared from the last checkpoint on, step for step
            pairs = [(s, counted.get((last or 0) + i + 1)) for i, s in enumerate(steps)]
    else:
        g.check(
            "step restored",
            True,
            "not checked: the optimizer keeps no step count (plain SGD); steps compared from the last checkpoint on",
        )
        pairs = [(s, counted.get((last or 0) + i + 1)) for i, s in enumerate(steps)]
    matched: list[tuple[ev.Event, ev.Event]] = [(a, b) for a, b in pairs if b is not None]
    if not matched:
        g.fail(
            "next losses equal the uninterrupted run",
            "no step of the resumed script matches a step the uninterrupted script took: nothing to compare",
        )
        return g
    lrs = [(x, y) for a, b in matched if (x := _num(a.get("lr"))) is not None and (y := _num(b.get("lr"))) is not None]
    if lrs:
        ok = all(same(x, y, False) for x, y in lrs)
        g.check(
            "learning rate restored",
            ok,
            f"lr {lrs[0][0]:.3g}"
            if ok
            else f"lr {lrs[0][0]:.6g} vs {lrs[0][1]:.6g} uninterrupted: the scheduler's state was not restored",
        )
    read = [
        (int(b.get("step") or 0), x, y)
        for a, b in matched
        if (x := _num(a.get("loss"))) is not None and (y := _num(b.get("loss"))) is not None
    ]
    if not read:
        g.check("next losses equal the uninterrupted run", False, "no loss read on the compared steps", warn=True)
        return g
    ok = len(read) == len(matched) and all(same(x, y, exact) for _, x, y in read)
    how = "bit-identical" if exact else "within 1e-5 (GPU kernels are not bit-deterministic)"
    g.check(
        "next losses equal the uninterrupted run",
        ok,
        (f"{how}: " if ok else _differ(g))
        + ", ".join(f"step {k} resumed {x:.6f}, uninterrupted {y:.6f}" for k, x, y in read),
    )
    return g


def _differ(g: Gate) -> str:
    """Which state a loss difference points at, from what the other checks found restored."""
    restored = [c["name"].removesuffix(" restored") for c in g.checks if c["name"].endswith(" restored") and c["ok"]]
    lost = [c["name"].removesuffix(" restored") for c in g.checks if c["name"].endswith(" restored") and not c["ok"]]
    if lost:
        return f"differ ({' and '.join(lost)} not restored): "
    if restored:
        return (
            f"differ with the {' and '.join(restored)} restored: the weights, the data order or the random state "
            "(a sampler re-seeded at start) differs after the restart: "
        )
    return "differ (data order, RNG or a state not restored): "


def _files(paths: list[str], k: int = 3) -> str:
    import os

    names = [os.path.basename(p) for p in paths]
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "") if names else "none"


def payload(g: Gate, second: Watched) -> ProbeGate:
    """The resume gate's event: the resumed process's memory (its whole life) and time."""
    ex = second.exit
    seconds = ex.get("seconds") if ex else None
    verdict = g.verdict
    return {
        "phase": ph.RESUME,
        "verdict": verdict.value,
        "checks": g.checks,
        "inputs": g.inputs,
        "remedy": ph.REMEDY[ph.RESUME] if verdict in (ev.Verdict.FAIL, ev.Verdict.WARN) else "",
        "message": g.message or "; ".join(f"{c['name']}: {c['detail']}" for c in g.failures()),
        "duration_s": seconds if isinstance(seconds, (int, float)) else second.seconds,
        "mem": (ex.get("mem") if ex else None) or {},
    }
