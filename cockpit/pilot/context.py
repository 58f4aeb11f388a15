"""The small context every phase works on: task, parameters, trainer, meter, run folder.

The pilot process builds one from the frozen ``run.toml`` (:mod:`.pilot`);
a test builds one around an in-memory task (:meth:`Context.in_memory`) and runs
a single phase without a subprocess, a run folder from the CLI or a notebook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import events as ev
from .. import runs
from ..contract import Example, Params
from ..notebook.settings import Settings
from .config import PilotConfig
from .datascan import SplitScan
from .meter import Meter
from .microsteps import ChildFound, FirstUpdate, Saved, Updated
from .task import Task
from .trainer import Trainer, resolve_device
from .usercode import user_int

Emit = Callable[..., object]  # emit(kind, **fields): writes one event
# spawn(what, ctx, distributed) -> (what the new process found, or None) and its words when it failed
Spawn = Callable[[str, "Context", bool], tuple[ChildFound | None, str]]


@dataclass(frozen=True)
class Measured:
    """What a phase's bounds measured, and the inputs it ran on (for a later phase's ratios, and run_end)."""

    mem: ev.Mem
    duration_s: float
    inputs: dict[str, ev.JSON]


@dataclass
class Context:
    params: Params
    seed: int
    device: torch.device
    rdir: Path
    emit: Emit
    meter: Meter
    pilot_cfg: PilotConfig = field(default_factory=PilotConfig)
    frozen: runs.RunToml = field(default_factory=lambda: runs.RunToml())
    rank: int = 0
    world: int = 1
    task: Task | None = None
    trainer_: Trainer | None = None
    measures: dict[str, Measured] = field(default_factory=dict)  # by phase
    scans: dict[str, SplitScan] = field(default_factory=dict)  # by split: the data gate's findings
    saved: Saved | None = None  # what the save phase wrote
    first: FirstUpdate | None = None  # handed from forward to backward to update_first (and update_second)
    spawn: Spawn | None = None
    phase: str = ""
    data_revision: dict[str, ev.JSON] = field(default_factory=dict)  # the data gate's hash over every example
    findings: dict[str, str] = field(default_factory=dict)  # what one gate measured that a later one explains by

    # ---- building

    @classmethod
    def in_memory(
        cls,
        task: Task,
        params: Params,
        *,
        seed: int = 0,
        rdir: Path | None = None,
        pilot: Mapping[str, object] | None = None,
        events: list[Mapping[str, object]] | None = None,
    ) -> Context:
        """A context around a task object, for running one phase in this process (tests)."""
        sink = events if events is not None else []

        def emit(kind: str, **payload: Any) -> object:
            e = ev.make(kind, **payload)
            sink.append(e)
            return e

        device = resolve_device(params.get("device", "cpu"))
        folder = Path(rdir) if rdir is not None else Path(tempfile.mkdtemp(prefix="cockpit-phase-"))
        ctx = cls(
            params=dict(params),
            seed=seed,
            device=device,
            rdir=folder,
            emit=emit,
            meter=Meter(device, emit=None),
            pilot_cfg=PilotConfig.from_table(pilot),
            task=task,
            frozen={"run": {"id": "r0000", "seed": seed}, "task": {"entry": task.name or "in-memory"}},
        )
        ctx.spawn = in_process
        return ctx

    # ---- what phases share

    @property
    def dist(self) -> bool:
        return self.world > 1

    @property
    def settings(self) -> Settings:
        """The run's effective settings, one accessor each, over the flat ``params`` the task receives."""
        return Settings(self.params)

    @property
    def trainer(self) -> Trainer:
        if self.trainer_ is None:
            raise RuntimeError("no trainer yet: the data phase builds it")
        return self.trainer_

    @property
    def first_update(self) -> FirstUpdate:
        if self.first is None:
            raise RuntimeError("no first update under way: the forward phase starts it")
        return self.first

    @property
    def saved_state(self) -> Saved:
        if self.saved is None:
            raise RuntimeError("nothing saved yet: the save phase writes it")
        return self.saved

    @property
    def the_task(self) -> Task:
        if self.task is None:
            raise RuntimeError("no task yet: the stack phase loads it")
        return self.task

    def log(self, message: str, level: str = "info") -> None:
        print(f"[{level}] {message}", flush=True)
        self.emit(ev.LOG, level=level, message=message)

    def max_length(self) -> int | None:
        if self.task is not None and self.task.max_length:
            return user_int("max_length", self.task.max_length, self.params, none=True)
        return None

    def batch_inputs(self, examples: list[Example]) -> dict[str, ev.JSON]:
        out: dict[str, ev.JSON] = {"microbatch": len(examples), "ids": [e.get("id") for e in examples][:8]}
        task = self.the_task
        if task.length:
            out["lengths"] = [user_int("length", task.length, e) for e in examples]
            ml = self.max_length()
            if ml:
                out["cropped_to"] = ml
        return out

    def step_event(self, out: Updated, phase: str, duration_s: float | None = None) -> None:
        self.emit(
            ev.STEP,
            step=out["step"],
            loss=ev.finite_or_none(out["loss"]),
            lr=out["lr"],
            grad_norm=ev.finite_or_none(out["grad_norm"]),
            examples=out["examples"],
            phase=phase,
            duration_s=duration_s,
        )

    def peak(self, phase: str) -> int | None:
        """A measured phase's peak by the one rule (torch peak reserved on a GPU, else peak RSS)."""
        m = self.measures.get(phase)
        return runs.mem_peak(m.mem)[0] if m else None

    def child(self, what: str, distributed: bool = False) -> tuple[ChildFound | None, str]:
        """Run ``what`` ("resume" or "replay") in a new process and return what it found."""
        return (self.spawn or subprocess_child)(what, self, distributed)


def subprocess_child(what: str, ctx: Context, distributed: bool) -> tuple[ChildFound | None, str]:
    """``python -m cockpit.pilot.child WHAT RUN_DIR`` in a new process; its findings from ``<what>.json``."""
    from . import dist as dist_
    from .threads import child_env

    env = child_env(os.environ.copy())
    name = f"{what}.json"
    if distributed:  # every rank starts its own new process; they form a new group on a new port
        port = dist_.broadcast(dist_.free_port() if ctx.rank == 0 else None)
        env.update({"MASTER_PORT": str(port), "COCKPIT_CHILD_DIST": "1"})
        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)  # rank 0's child hosts its own store
        if ctx.rank:
            name = f"{what}.rank{ctx.rank}.json"
    else:
        env["WORLD_SIZE"], env["RANK"] = "1", "0"
    out = ctx.rdir / name
    if out.exists():
        out.unlink()
    cmd = [sys.executable, "-m", "cockpit.pilot.child", what, str(ctx.rdir)]
    t0 = time.perf_counter()
    limit = float(os.environ.get("COCKPIT_CHILD_TIMEOUT_S", "1800"))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=limit)
    except subprocess.TimeoutExpired as exc:
        said = exc.output if isinstance(exc.output, str) else (exc.output or b"").decode(errors="replace")
        return None, f"no answer after {limit:g} s (COCKPIT_CHILD_TIMEOUT_S); its output: {said[-300:]}"
    elapsed = time.perf_counter() - t0
    if proc.stdout:
        print(proc.stdout, end="", flush=True)
    if proc.returncode != 0 or not out.exists():
        tail = proc.stdout.strip().splitlines()[-3:] if proc.stdout else []
        return None, f"exit {proc.returncode}: {' | '.join(tail)}"
    data: ChildFound = json.loads(out.read_text())
    data["elapsed_s"] = elapsed
    return data, f"pid {data.get('pid')} in {elapsed:.1f} s"


def in_process(what: str, ctx: Context, distributed: bool) -> tuple[ChildFound | None, str]:
    """The child's work in this process (tests of a single phase): same checks, no new interpreter."""
    from . import child

    t0 = time.perf_counter()
    fn = {"resume": child.resume_with, "replay": child.replay_with}[what]
    data = fn(ctx.the_task, ctx.params, ctx.seed, ctx.rdir, ctx.device, ctx.pilot_cfg)
    data["elapsed_s"] = time.perf_counter() - t0
    return data, f"in this process in {data['elapsed_s']:.1f} s"
