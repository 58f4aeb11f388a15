"""What the update gates' invariant checks (``cockpit/pilot/phases/optimizing.py``, ``augmentation.py``) cost on the
demo task, against the update they sit beside.

Builds the demo's tinylm with its campaign's settings (microbatch 2, accumulation 8, AdamW with weight decay,
grad_clip 1.0), runs the pilot's phases up to update_second in this process, then times each check alone over
``--rounds`` repetitions (median) and one plain update, and prints each check's time and its share of an update.

    python bench/update_checks.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cockpit.pilot.context import Context  # noqa: E402
from cockpit.pilot.gate import Gate  # noqa: E402
from cockpit.pilot.phases import PHASES, optimizing, schedules  # noqa: E402
from cockpit.pilot.phases.augmentation import epochs_differ  # noqa: E402
from cockpit.pilot.phases.steps import param_fingerprint  # noqa: E402
from cockpit.pilot.pilot import run_phase  # noqa: E402
from cockpit.tasks import tinylm  # noqa: E402

DEMO = {
    "d_model": 64,
    "n_layers": 2,
    "n_heads": 4,
    "max_length": 48,
    "train_examples": 3200,
    "val_examples": 96,
    "test_examples": 96,
    "microbatch": 2,
    "accumulation": 8,
    "updates": 200,
    "eval_microbatch": 16,
    "lr": 1e-4,
    "optimizer": "adamw",
    "weight_decay": 0.01,
    "grad_clip": 1.0,
    "precision": "fp32",
    "device": "cpu",
}


def median_time(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ctx = Context.in_memory(tinylm.task, DEMO)
    with contextlib.redirect_stdout(io.StringIO()):
        for phase in PHASES:
            run_phase(ctx, phase)
            if phase.name == "update_second":
                break
    tr = ctx.trainer
    assert ctx.first is not None
    g = Gate("bench")
    before = param_fingerprint(tr.model)
    norms = optimizing.StepNorms(tr.optimizer)
    update = median_time(lambda: tr.update(), args.rounds)
    hook = median_time(lambda: optimizing.held_grad_norm(tr.optimizer), args.rounds)
    norms.close()
    after = param_fingerprint(tr.model)
    checks: dict[str, Callable[[], object]] = {
        "optimizer holds only the model's parameters": lambda: optimizing.held_outside_model(ctx, g),
        "weight decay (both checks)": lambda: optimizing.weight_decay(ctx, g),
        "every stepped parameter changed (2 fingerprints + check)": lambda: (
            param_fingerprint(tr.model),
            param_fingerprint(tr.model),
            optimizing.stepped_changed(ctx, g, before, after, tr.step),
        ),
        "schedule steps once per update": lambda: schedules.schedule_steps(ctx, g, 0, 5),
        "schedule spans the run": lambda: schedules.schedule_span(ctx, g),
        "gradient clipping: the pre-hook's norm, once per update (x5)": lambda: [
            optimizing.held_grad_norm(tr.optimizer) for _ in range(5)
        ],
        "augmentations differ across epochs (2 collates)": lambda: epochs_differ(ctx, g, ctx.first.microbatches[0]),
    }
    print(
        f"demo tinylm, {sum(p.numel() for p in tr.model.parameters()):,} parameters; one update {update * 1e3:.1f} ms"
    )
    print(f"  {'check':<62} {'ms':>8} {'x update':>9}")
    total = 0.0
    for name, fn in checks.items():
        t = median_time(fn, args.rounds)
        total += t
        print(f"  {name:<62} {t * 1e3:8.2f} {t / update:9.3f}")
    print(f"  {'all of them, per pilot':<62} {total * 1e3:8.2f} {total / update:9.3f}")
    print(f"  (the pre-hook alone: {hook * 1e3:.2f} ms per update, {hook / update:.3%} of one)")


if __name__ == "__main__":
    main()
