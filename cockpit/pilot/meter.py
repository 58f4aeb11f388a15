"""Memory and time counters, taken within the same bounds for every phase and every GPU.

For a phase: synchronize, reset the peak counters, read the baseline, run
the phase, synchronize, read torch allocated / reserved / peak allocated /
peak reserved, NVML used / total for every visible GPU, process RSS and the
wall time. On a machine without CUDA or NVML the GPU counters are ``None``
(absent), never zero. A sampler thread adds NVML and RSS samples to the
event stream for live charts; it never touches the training loop.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import psutil
import torch

from .. import events as ev
from ..nvml import Nvml


def _cuda() -> bool:
    return torch.cuda.is_available()


def torch_counters(device: torch.device | None) -> ev.TorchCounters | None:
    if device is None or device.type != "cuda":
        return None
    return {
        "allocated": int(torch.cuda.memory_allocated(device)),
        "reserved": int(torch.cuda.memory_reserved(device)),
        "peak_allocated": int(torch.cuda.max_memory_allocated(device)),
        "peak_reserved": int(torch.cuda.max_memory_reserved(device)),
    }


@dataclass
class PhaseMeasure:
    """Filled when the phase's ``with`` block ends."""

    duration_s: float = 0.0
    mem: ev.Mem = field(default_factory=lambda: cast(ev.Mem, {}))  # empty until the block ends


class Meter:
    def __init__(self, device: torch.device | None = None, emit: Any = None, sample_hz: float = 20.0):
        self.device = device
        self.nvml = Nvml()
        self.proc = psutil.Process()
        self.emit = emit
        self.phase_name = ""
        self.baseline: ev.Baseline | None = None
        self._sample_interval = 1.0 / sample_hz
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rss_peak = 0
        self._rss_lock = threading.Lock()

    # ---- counters

    def sync(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def rss(self) -> int:
        r = int(self.proc.memory_info().rss)
        with self._rss_lock:
            self._rss_peak = max(self._rss_peak, r)
        return r

    def take_baseline(self) -> ev.Baseline:
        """Before the model loads: what the process and the GPUs hold already."""
        self.sync()
        t = torch_counters(self.device)
        nv = self.nvml.memory()
        self.baseline = {
            "torch_allocated": t["allocated"] if t else None,
            "nvml_used": [g["used"] for g in nv] if nv else None,
            "rss": self.rss(),
        }
        return self.baseline

    @contextlib.contextmanager
    def measure(self, phase: str) -> Iterator[PhaseMeasure]:
        m = PhaseMeasure()
        self.phase_name = phase
        self.sync()
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        with self._rss_lock:
            self._rss_peak = 0
        self.rss()
        t0 = time.perf_counter()
        try:
            yield m
        finally:
            self.sync()
            m.duration_s = time.perf_counter() - t0
            m.mem = self.read()

    def read(self) -> ev.Mem:
        rss = self.rss()
        with self._rss_lock:
            peak = self._rss_peak
        return {
            "torch": torch_counters(self.device),
            "nvml": self.nvml.memory(),
            "rss": rss,
            "rss_peak": peak,
            "baseline": self.baseline,
        }

    # ---- sampler thread

    def start_sampler(self) -> None:
        if self.emit is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="cockpit-sampler", daemon=True)
        self._thread.start()

    def stop_sampler(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None

    def _run(self) -> None:
        cuda = self.device is not None and self.device.type == "cuda"
        while not self._stop.wait(self._sample_interval):
            try:
                payload: ev.SampleFields = {
                    "phase": self.phase_name,
                    "rss": self.rss(),
                    "nvml": self.nvml.sample(),
                    "torch": (
                        {
                            "allocated": int(torch.cuda.memory_allocated(self.device)),
                            "reserved": int(torch.cuda.memory_reserved(self.device)),
                        }
                        if cuda
                        else None
                    ),
                }
                self.emit("sample", **payload)
            except Exception:  # noqa: BLE001 - a sampler must never take the run down
                continue


def stack_info(device: torch.device | None, nvml: Nvml | None = None) -> ev.Stack:
    """The software stack, for run_start and the stack gate."""
    import platform

    nvml = nvml or Nvml()
    gpus: list[ev.StackGpu] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append(
                {
                    "index": i,
                    "name": p.name,
                    "total": int(p.total_memory),
                    "capability": f"{p.major}.{p.minor}",
                }
            )
    bf16 = None
    if torch.cuda.is_available():
        bf16 = bool(torch.cuda.is_bf16_supported())
    nccl = None
    try:
        import torch.distributed as dist

        nccl = bool(dist.is_available() and dist.is_nccl_available())
    except Exception:  # noqa: BLE001
        nccl = False
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "build": "cuda" if torch.version.cuda else ("rocm" if getattr(torch.version, "hip", None) else "cpu"),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "driver": nvml.driver(),
        "nvml": nvml.available,
        "nvml_error": nvml.error or None,
        "gpus": gpus,
        "bf16": bf16,
        "nccl": nccl,
        "gloo": bool(getattr(torch.distributed, "is_gloo_available", lambda: False)()),
        "device": str(device) if device is not None else "cpu",
        "cpu_count": os.cpu_count(),
        "memory_total": int(psutil.virtual_memory().total),
    }
