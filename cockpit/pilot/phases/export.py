"""Export: the evaluation artifact is written, reloaded safely in a new process, and replays the control inputs."""

from __future__ import annotations

import time

from ... import runs
from .. import checkpoint as ck
from ..context import Context
from ..gate import Gate, Phase
from ..returned import control_examples


def run(ctx: Context, g: Gate) -> None:
    tr = ctx.trainer
    if ctx.rank != 0:
        g.check("exported once, by rank 0", True, "parameters are identical on every rank")
        return
    adir = ctx.rdir / runs.ARTIFACT_DIR
    t0 = time.perf_counter()
    task = tr.task
    controls = control_examples(task, ctx.params, tr.splits)
    manifest = ck.export_trained(
        tr,
        adir,
        {
            "run": ctx.frozen["run"]["id"],
            "entry": ctx.frozen["task"]["entry"],
            "params": ctx.params,
            "step": tr.step,
            "seed": ctx.seed,
            "data_revision": ctx.data_revision,
            "task_code": (ctx.frozen.get("revisions") or {}).get("task_code"),
        },
        controls,
    )
    g.inputs.update({"controls": len(controls), "step": tr.step, "weights": manifest["weights"]})
    mb = manifest["files"][ck.MODEL_FILE]["bytes"]
    what = "weights"
    if manifest["weights"] == "adapter":
        base = manifest["base"]
        what = (
            f"adapter weights ({manifest['adapter']['values']:,} values; the base's "
            f"{base['values']:,} recorded by identity, SHA-256 {str(base['sha256'])[:12]}…)"
        )
        g.extra["base"] = base
    g.check("artifact written", mb > 0, f"{mb / 2**20:.2f} MiB {what} in {time.perf_counter() - t0:.2f} s")
    g.extra["bytes"] = sum(int(f["bytes"]) for f in manifest["files"].values())
    data, said = ctx.child("replay")
    if data is None:
        g.fail("new process", said)
        return
    g.check("new process", True, said)
    g.check("safe reload", data["safe"], "torch.load(weights_only=True), hashes verified")
    g.check("replay reproduces control outputs", data["equal"], data["detail"])


PHASE = Phase(
    "export",
    run,
    remedy="fix export or loading: save a state_dict of tensors, rebuild the model from the task, replay",
    checks=(
        "artifact written",
        "new process",
        "safe reload",
        "replay reproduces control outputs",
        "exported once, by rank 0",
    ),
    doc="artifact exported, reloaded safely, control inputs replayed",
)
