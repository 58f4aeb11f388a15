"""Resume: a new process restores the checkpoint and continues exactly where the pilot went on."""

from __future__ import annotations

from ..context import Context
from ..gate import Gate, Phase
from ..microsteps import ChildFound


def run(ctx: Context, g: Gate) -> None:
    tr = ctx.trainer
    k = ctx.pilot_cfg.updates_after_resume
    g.inputs.update({"from_step": ctx.saved_state["step"], "updates": k})
    losses = []
    for _ in range(k):
        out = tr.update()
        ctx.step_event(out, "resume")
        losses.append(out["loss"])
    data, said = ctx.child("resume", distributed=ctx.dist)
    if data is None:
        g.fail("new process", said)
        return
    g.check("new process", True, said)
    compare(ctx, g, data, losses)
    g.extra["child_peak"] = data.get("peak")


def compare(ctx: Context, g: Gate, data: ChildFound, losses: list[float]) -> None:
    """What the resumed process found against what the uninterrupted pilot did."""
    saved = ctx.saved_state
    g.check("step restored", data["step"] == saved["step"], f"step {data['step']} (saved {saved['step']})")
    g.check("learning rate restored", data["lr"] == saved["lr"], f"lr {data['lr']:.3g}")
    g.check(
        "data position restored",
        data["data"] == saved["data"],
        f"epoch {data['data']['epoch']}, position {data['data']['cursor']}",
    )
    got = data["losses"]
    if ctx.device.type == "cpu":
        same = got == losses
        detail = "bit-identical: " if same else "differ: "
    else:
        same = len(got) == len(losses) and all(
            abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(got, losses, strict=False)
        )
        detail = "within 1e-5 (GPU kernels are not bit-deterministic): " if same else "differ: "
    detail += ", ".join(f"{a:.6f}/{b:.6f}" for a, b in zip(got, losses, strict=False))
    g.check("next losses equal the uninterrupted run", same, detail)


PHASE = Phase(
    "resume",
    run,
    remedy="fix the checkpoint: everything that changes during training must be saved and restored",
    checks=(
        "new process",
        "step restored",
        "learning rate restored",
        "data position restored",
        "next losses equal the uninterrupted run",
    ),
    doc="new process: state restored, next losses identical",
)
