"""Work the pilot runs in a *new* process: resume from the checkpoint, replay the export.

``python -m cockpit.pilot.child resume RUN_DIR`` restores the checkpoint and
runs the next updates; ``... replay RUN_DIR`` reloads the exported artifact
with safe loading only and replays the control inputs. Each writes its
findings to ``RUN_DIR/<what>.json`` for the pilot to compare. The work itself
(:func:`resume_with`, :func:`replay_with`) takes the task as an object, so a
test can run it in its own process around an in-memory task.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil
import torch

from .. import fsutil, runs
from ..contract import Params
from ..notebook.settings import Settings
from . import checkpoint as ck
from .config import PilotConfig
from .microsteps import ChildFound
from .task import Task, load_task
from .trainer import Trainer, resolve_device


def _trainer(task: Task, params: Params, seed: int, device: torch.device) -> Trainer:
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        from . import dist

        dist.init()
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    tr = Trainer(task, params, seed, device, rank=rank, world=world)
    tr.load_data()
    tr.build()
    return tr


def _peak(tr: Trainer) -> int:
    if tr.device.type == "cuda":
        return int(torch.cuda.max_memory_reserved(tr.device))
    return int(psutil.Process().memory_info().rss)


def resume_with(
    task: Task, params: Params, seed: int, rdir: Path, device: torch.device, pilot: PilotConfig
) -> ChildFound:
    tr = _trainer(task, params, seed, device)
    tr.load_state_dict(ck.safe_load(Path(rdir) / runs.CHECKPOINT, map_location=tr.device))
    out: ChildFound = {
        "pid": os.getpid(),
        "step": tr.step,
        "lr": float(tr.optimizer.param_groups[0]["lr"]),
        "data": tr.order.state(),
    }
    out["losses"] = [tr.update()["loss"] for _ in range(pilot.updates_after_resume)]
    out["peak"] = _peak(tr)
    return out


def replay_with(
    task: Task, params: Params, seed: int, rdir: Path, device: torch.device, pilot: PilotConfig
) -> ChildFound:
    adir = Path(rdir) / runs.ARTIFACT_DIR
    manifest = ck.verify_manifest(adir)
    tr = _trainer(task, params, seed, device)
    return {"pid": os.getpid(), "safe": True, **replay_into(tr, adir / ck.MODEL_FILE, adir / ck.CONTROL_FILE, manifest)}


def replay_into(tr: Trainer, model_file: Path, control_file: Path, manifest: ck.Manifest) -> ChildFound:
    """Load the exported weights (safely; an adapter only over its recorded base) and replay the control inputs."""
    loaded, said = ck.load_exported(tr, ck.safe_load(model_file, map_location=tr.device), manifest)
    out: ChildFound = {"weights": manifest.get("weights", "whole model"), "loaded": said}
    if not loaded:
        return {**out, "equal": False, "detail": said}
    recorded = ck.safe_load(control_file)
    controls = ck.controls_of(manifest, recorded)
    got = tr.control_outputs(controls)
    equal, detail = ck.compare_controls(got, recorded, len(controls), tr.device.type == "cpu")
    if manifest.get("weights") == "adapter":
        detail = f"{detail}; {said}"
    if got.get("generated") is not None:
        out["generated"] = got["generated"]
    return {**out, "equal": equal, "detail": detail}


def main(argv: list[str]) -> int:
    from .threads import follow_parent_threads

    what, rdir = argv[0], Path(argv[1])
    follow_parent_threads()  # the run's thread count: losses compared bit for bit must be summed the same way
    frozen = runs.read_run_toml(rdir)
    params = dict(frozen["params"])
    task = load_task(frozen["task"]["entry"], rdir.parent.parent)
    fn = {"resume": resume_with, "replay": replay_with}[what]
    result = fn(
        task,
        params,
        int(frozen["run"]["seed"]),
        rdir,
        resolve_device(Settings(params).device),
        PilotConfig.from_table(frozen.get("pilot")),
    )
    rank = int(os.environ.get("RANK", "0"))
    name = f"{what}.json" if rank == 0 else f"{what}.rank{rank}.json"
    fsutil.write_text(rdir / name, json.dumps(result))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed

        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
