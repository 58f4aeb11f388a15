"""Stack: torch, CUDA, driver, GPUs, the task's extensions, and the task itself load."""

from __future__ import annotations

import torch

from ... import events as ev
from ... import machine
from ..context import Context
from ..gate import Gate, Phase
from ..meter import stack_info
from ..task import TaskError, load_task
from ..trainer import UserCodeError


def run(ctx: Context, g: Gate) -> None:
    info = stack_info(ctx.device, ctx.meter.nvml)
    g.check("torch", True, f"torch {info['torch']} ({info['build']} build)")
    if ctx.device.type == "cuda":
        g.check("cuda", torch.cuda.is_available(), f"CUDA {info['cuda']}, driver {info['driver']}")
    else:
        g.check("device", True, "CPU: GPU counters are recorded as absent")
    if ctx.settings.precision == "bf16" and ctx.device.type == "cuda":
        g.check("bf16", bool(info["bf16"]), "bf16 supported" if info["bf16"] else "this GPU has no bf16")
    if ctx.world > 1 and ctx.device.type == "cuda":
        g.check("nccl", bool(info["nccl"]), "NCCL available" if info["nccl"] else "NCCL missing")
    for ext in ctx.frozen.get("task", {}).get("extensions", []):
        try:
            __import__(ext)
            g.check(f"import {ext}", True, "imported")
        except Exception as exc:  # noqa: BLE001 - reported as the check's failure
            g.check(f"import {ext}", False, f"{type(exc).__name__}: {exc}")
    if ctx.task is None:
        entry = ctx.frozen["task"]["entry"]
        try:
            ctx.task = load_task(entry, ctx.rdir.parent.parent)
        except TaskError as exc:
            g.check("task", False, str(exc))
            g.remedy = "fix [task] entry in campaign.toml or the task file as the message says, then `cockpit check`"
            return
        except Exception as exc:
            raise UserCodeError("task import", exc) from exc
    g.check("task", True, f"{ctx.frozen['task']['entry']} ({ctx.task.kind})")
    g.extra["stack"] = info
    if ctx.device.type == "cuda":
        others = machine.gpu_others()
        g.extra["gpu_others"] = others
        held = sum(int(p.get("used") or 0) for p in others)
        g.check(
            "GPU memory free at start",
            not others,
            "no other process holds GPU memory"
            if not others
            else f"{held / 2**20:,.0f} MiB already held by other processes ({machine.describe_others(others)}): "
            "NVML's figures include them; the selection sheet sizes from this run's own memory. Stop them "
            "(a forgotten notebook kernel, a previous run) before timing and sizing",
            warn=True,
        )


def inputs(ctx: Context) -> dict[str, ev.JSON]:
    return {"device": str(ctx.device), "precision": ctx.params.get("precision")}


PHASE = Phase(
    "stack",
    run,
    remedy="install a torch build that matches the driver and the task's extensions; set training.device",
    checks=("torch", "cuda", "device", "bf16", "nccl", "import <extension>", "task"),
    inputs=inputs,
    doc="software stack: torch, CUDA, driver, GPUs, extensions",
)
