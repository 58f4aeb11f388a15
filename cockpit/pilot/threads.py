"""Torch's intra-op threads fitted to the CPUs this process may use *and* finds free (the pilot side: imports torch).

On a busy box every intra-op thread beyond the free CPUs waits for a core at each parallel region: the demo pilot
took 97-101 s at a load of 4-8 on 2 CPUs with torch's default threads, and 15-27 s with one thread on the same box
(bench/busy_threads.py prints the two side by side). So the threads are the CPUs this process may use less what
other processes kept busy during a short look at start, never fewer than one. ``OMP_NUM_THREADS`` set by the user
is kept as it is.
"""

from __future__ import annotations

import math
import os
import time

import torch

from ..machine import available_cpus, others_busy_cpus
from ..schema import JSON

LOOK_S = 0.3  # how long the start looks at what other processes keep busy


def thread_settings() -> dict[str, JSON]:
    out: dict[str, JSON] = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "cpus_available": available_cpus()}
    out["torch_threads"] = torch.get_num_threads()
    return out


def threads_for(cpus: float, others: float) -> int:
    """The CPUs left free by other processes, rounded to the nearest whole CPU, at least one."""
    return max(1, min(int(cpus), math.floor(cpus - others + 0.5)))


PARENT_THREADS = "COCKPIT_TORCH_THREADS"  # the threads of the run a child process works for (resume, replay)


def child_env(env: dict[str, str]) -> dict[str, str]:
    """A child of this run (resume, replay) computes with the same threads: a float sum over another number of
    threads rounds differently, and the resume check compares losses bit for bit."""
    return {**env, PARENT_THREADS: str(torch.get_num_threads())}


def follow_parent_threads() -> str:
    """In a child process: the run's own thread count, whatever the machine's load is now."""
    n = os.environ.get(PARENT_THREADS, "")
    if n.isdigit() and int(n) > 0:
        torch.set_num_threads(int(n))
        return f"torch threads {n}, as the run it works for"
    return f"torch threads {torch.get_num_threads()}"


def fit_torch_threads() -> str:
    """Torch's intra-op threads to the free CPUs this process may use (unless OMP_NUM_THREADS chose); what was done."""
    if os.environ.get("OMP_NUM_THREADS"):
        return f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}: kept"
    cpus = available_cpus()
    t0 = time.monotonic()
    others = others_busy_cpus(LOOK_S)
    want = threads_for(cpus, others)
    have = torch.get_num_threads()
    if have != want and want <= int(cpus):
        torch.set_num_threads(want)
        why = (
            f"other processes kept {others:.1f} of {cpus:g} CPUs busy"
            if others >= 0.5
            else "the CPUs this process may use, not the machine's count"
        )
        return f"torch threads {have} -> {want} ({why}; looked {time.monotonic() - t0:.1f} s)"
    return f"torch threads {have}"
