"""Distributed pilots under torchrun: process group, agreement between ranks, who hung.

torchrun (``torch.distributed.run``) starts one pilot process per rank with
RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT set. Every collective runs
with a timeout (``COCKPIT_COLLECTIVE_TIMEOUT_S``, default 600 s), so a rank
that hangs ends the run with a status naming it instead of a silent hang.
"""

from __future__ import annotations

import datetime
import os
import socket
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .. import events as ev


def timeout_s() -> float:
    return float(os.environ.get("COCKPIT_COLLECTIVE_TIMEOUT_S", "600"))


def backend() -> str:
    forced = os.environ.get("COCKPIT_DIST_BACKEND")
    if forced:
        return forced
    return "nccl" if torch.cuda.is_available() else "gloo"


def init() -> None:
    if dist.is_initialized():
        return
    if torch.cuda.is_available() and backend() == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend(), timeout=datetime.timedelta(seconds=timeout_s()))


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def any_rank(flag: bool) -> bool:
    """True when the flag is set on any rank (doubles as the barrier after a phase)."""
    t = torch.tensor([1 if flag else 0], device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def barrier() -> None:
    any_rank(False)


def gather(obj: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj: Any) -> Any:
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def lagging(rdir: Path, world: int, me: int) -> str:
    """Which ranks are behind, from the shared events file: 'rank 1 last in phase X'."""
    evs = ev.read_events(Path(rdir) / ev.EVENTS_FILE)
    mine = ev.last_phase(evs, me)
    out = []
    for r in range(world):
        if r == me:
            continue
        ph = ev.last_phase(evs, r)
        ended = any(e["kind"] == ev.RUN_END and (e.get("rank") or 0) == r for e in evs)
        if ended:
            out.append(f"rank {r} already ended")
        elif ph != mine:
            out.append(f"rank {r} last seen in phase {ph or 'start-up'}")
        else:
            out.append(f"rank {r} still inside phase {ph}, not finished")
    return "; ".join(out) or "no other rank"
