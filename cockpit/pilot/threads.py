"""Torch's intra-op threads fitted to the CPUs this process may use (the pilot side: imports torch)."""

from __future__ import annotations

import os
from typing import Any

import torch

from ..machine import available_cpus


def thread_settings() -> dict[str, Any]:
    out: dict[str, Any] = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "cpus_available": available_cpus()}
    out["torch_threads"] = torch.get_num_threads()
    return out


def fit_torch_threads() -> str:
    """Torch's intra-op threads to the CPUs this process may use (unless OMP_NUM_THREADS chose); what was done."""
    if os.environ.get("OMP_NUM_THREADS"):
        return f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}: kept"
    want = max(1, int(available_cpus()))
    have = torch.get_num_threads()
    if have > want:
        torch.set_num_threads(want)
        return f"torch threads {have} -> {want} (the CPUs this process may use, not the machine's count)"
    return f"torch threads {have}"
