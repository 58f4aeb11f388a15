"""Work the pilot runs in a *new* process: resume from the checkpoint, replay the export.

``python -m cockpit.pilot.child resume RUN_DIR`` restores the checkpoint and
runs the next updates; ``... replay RUN_DIR`` reloads the exported artifact
with safe loading only and replays the control inputs. Each writes its
findings to ``RUN_DIR/<what>.json`` for the pilot to compare.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import psutil
import torch

from .. import runs
from . import checkpoint as ck
from .task import load_task
from .train import Trainer, resolve_device


def _trainer(rdir: Path) -> tuple[Trainer, dict[str, Any]]:
    frozen = runs.read_run_toml(rdir)
    params = dict(frozen["params"])
    task = load_task(frozen["task"]["entry"], rdir.parent.parent)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    device = resolve_device(params.get("device"))
    if world > 1:
        from . import dist

        dist.init()
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    tr = Trainer(task, params, int(frozen["run"]["seed"]), device, rank=rank, world=world)
    tr.load_data()
    tr.build()
    return tr, frozen


def _peak(tr: Trainer) -> int:
    if tr.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(tr.device))
    return int(psutil.Process().memory_info().rss)


def resume(rdir: Path) -> dict[str, Any]:
    tr, frozen = _trainer(rdir)
    tr.load_state_dict(ck.safe_load(rdir / ck.CHECKPOINT, map_location=tr.device))
    out: dict[str, Any] = {
        "pid": os.getpid(),
        "step": tr.step,
        "lr": float(tr.optimizer.param_groups[0]["lr"]),
        "data": tr.order.state(),
    }
    k = int(frozen.get("pilot", {}).get("updates_after_resume", 2))
    out["losses"] = [tr.update()["loss"] for _ in range(k)]
    out["peak"] = _peak(tr)
    return out


def replay(rdir: Path) -> dict[str, Any]:
    from .gates import control_outputs

    adir = rdir / ck.ARTIFACT_DIR
    manifest = ck.verify_manifest(adir)
    tr, _ = _trainer(rdir)
    tr.model.load_state_dict(ck.safe_load(adir / ck.MODEL_FILE, map_location=tr.device))
    recorded = ck.safe_load(adir / ck.CONTROL_FILE)
    got = control_outputs(tr, manifest["controls"])
    exact = tr.device.type == "cpu"
    if exact:
        equal = bool(torch.equal(got["predictions"], recorded["predictions"])) and float(got["loss"]) == float(recorded["loss"])
        how = "bit-identical"
    else:
        equal = bool(torch.equal(got["predictions"], recorded["predictions"])) and abs(float(got["loss"]) - float(recorded["loss"])) <= 1e-5 * max(1.0, abs(float(recorded["loss"])))
        how = "predictions identical, loss within 1e-5"
    detail = f"{len(manifest['controls'])} control inputs, {how}: loss {float(got['loss']):.6f} vs {float(recorded['loss']):.6f}" if equal else (
        f"replayed loss {float(got['loss']):.6f} vs recorded {float(recorded['loss']):.6f}; predictions "
        f"{'equal' if torch.equal(got['predictions'], recorded['predictions']) else 'differ'}")
    return {"pid": os.getpid(), "safe": True, "equal": equal, "detail": detail}


def main(argv: list[str]) -> int:
    what, rdir = argv[0], Path(argv[1])
    result = {"resume": resume, "replay": replay}[what](rdir)
    rank = int(os.environ.get("RANK", "0"))
    name = f"{what}.json" if rank == 0 else f"{what}.rank{rank}.json"
    tmp = rdir / (name + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, rdir / name)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed

        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
