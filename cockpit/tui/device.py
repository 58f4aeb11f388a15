"""What the GPUs of this machine are doing, read through NVML. No textual here.

NVML is read through cockpit/nvml.py (initialised lazily, once, under a lock, as nvitop's ``libnvml``);
every field is read on its own, so one the driver does not support is shown
as "not available" (None) instead of failing the whole reading; a missing
library or driver becomes a snapshot with ``error`` set, never an exception.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .. import nvml


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used: int | None


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    used: int | None
    total: int | None
    util: int | None  # percent
    power_w: float | None
    power_limit_w: float | None
    temperature_c: int | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class DeviceSnapshot:
    gpus: tuple[GpuReading, ...] = ()
    driver: str | None = None
    error: str | None = None  # set when there is no usable NVIDIA GPU; says why

    @property
    def available(self) -> bool:
        return self.error is None


class DeviceSource(Protocol):
    def read(self) -> DeviceSnapshot: ...
    def machine(self, campaign_dir: Path, running: list[str]) -> MachineFacts | None: ...


NO_GPU = "no NVIDIA GPU"


@dataclass
class StaticDeviceSource:
    """A fixed reading: for tests, snapshots and machines where NVML must not be touched."""

    snapshot: DeviceSnapshot = field(default_factory=lambda: DeviceSnapshot(error=f"{NO_GPU}: NVML not queried"))
    facts: MachineFacts | None = None  # the disk and CPUs as they should be shown (None: not shown)

    def read(self) -> DeviceSnapshot:
        return self.snapshot

    def machine(self, campaign_dir: Path, running: list[str]) -> MachineFacts | None:
        return self.facts


class NvmlSource:
    """Reads NVML on demand, through the one NVML wrapper (cockpit/nvml.py). Safe to call from a worker thread."""

    def machine(self, campaign_dir: Path, running: list[str]) -> MachineFacts | None:
        return machine_facts(campaign_dir, running)

    def __init__(self, library: nvml.Library = nvml.NVML) -> None:
        self._lock = threading.Lock()
        self._lib = library

    def read(self) -> DeviceSnapshot:
        with self._lock:
            failure = self._lib.failure()
            if isinstance(failure, ImportError):
                return DeviceSnapshot(error=f"{NO_GPU}: the NVML bindings (nvidia-ml-py) are not installed")
            if failure is not None:
                return DeviceSnapshot(error=f"{NO_GPU}: {_nvml_reason(failure)}")
            count = self._lib.device_count()
            if count is None:
                return DeviceSnapshot(error=f"{NO_GPU}: {_nvml_reason(self._lib.last_error)}")
            if count == 0:
                return DeviceSnapshot(error=f"{NO_GPU}: the driver sees no devices")
            driver = self._lib.driver()
            return DeviceSnapshot(gpus=tuple(self._gpu(i) for i in range(count)), driver=driver)

    def _gpu(self, i: int) -> GpuReading:
        lib = self._lib
        h = lib.handle(i)
        mem = lib.memory(h) if h is not None else None
        return GpuReading(
            index=i,
            name=(lib.name(h) if h is not None else None) or f"GPU {i}",
            used=mem.used if mem else None,
            total=mem.total if mem else None,
            util=lib.utilization(h) if h is not None else None,
            power_w=lib.power_w(h) if h is not None else None,
            power_limit_w=lib.power_limit_w(h) if h is not None else None,
            temperature_c=lib.temperature_c(h) if h is not None else None,
            processes=tuple(
                GpuProcess(p.pid, _proc_name(p.pid), p.used)
                for p in ((lib.processes(h) if h is not None else None) or [])
            ),
        )


def _proc_name(pid: int) -> str:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:
        return "?"


def _nvml_reason(exc: BaseException | None) -> str:
    if exc is None:
        return "NVML gave no answer"
    text = str(exc) or type(exc).__name__
    if "Driver Not Loaded" in text or "Library Not Found" in text or "not found" in text.lower():
        return f"{text} (no NVIDIA driver on this machine)"
    return text


@dataclass(frozen=True)
class MachineFacts:
    """What else the box holds, beside the GPUs: the disk under ``runs/`` and the CPUs' load."""

    runs_dir: str
    disk_free: int | None  # bytes free on the filesystem holding runs/
    disk_total: int | None
    cpus: float  # the CPUs this process may use (affinity, cgroup quota)
    load1: float | None  # the 1-minute load average
    cockpit_pids: dict[int, str]  # pid -> run id, for the runs of this campaign that are running


def machine_facts(campaign_dir: Path, running: list[str]) -> MachineFacts:
    """Read in a worker thread: free disk for ``runs/``, CPUs and load, the pids of this campaign's running runs."""
    import shutil

    from .. import machine, runs

    rdir = campaign_dir / runs.RUNS_DIR
    free = total = None
    try:
        free = machine.free_bytes(rdir)
        p = rdir if rdir.exists() else campaign_dir
        total = int(shutil.disk_usage(p).total)
    except OSError:
        pass
    try:
        load1: float | None = os.getloadavg()[0]
    except OSError:
        load1 = None
    pids: dict[int, str] = {}
    for rid in running:
        try:
            info = runs.process_info(runs.run_dir(campaign_dir, rid))
        except runs.BadRunId:
            continue
        if info and isinstance(info.get("pid"), int):
            pids[int(info["pid"])] = rid
    return MachineFacts(str(rdir), free, total, machine.available_cpus(), load1, pids)
