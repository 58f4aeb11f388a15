"""The machine as it is: the CPUs this process may use, what else keeps them busy, who else holds GPU memory,
and free disk. No torch (psutil; NVML through cockpit/nvml.py).

A rented box is rarely empty. A phase timed while other processes kept the
CPUs busy is marked busy (its time says little about an idle machine); GPU
memory held by other processes is named at the start and kept out of the
sheet's sizing; the disk a series needs is measured against what is free.
Tests fake each: ``COCKPIT_FAKE_OTHERS_CPU`` (CPUs other processes keep busy),
``COCKPIT_FAKE_GPU_PROCESSES`` ("gpu:pid:name:MiB,..."), ``COCKPIT_FAKE_FREE_MIB``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .nvml import NVML
from .schema import CpuLoad, GpuProcess

MIB = 2**20


def available_cpus() -> float:
    """CPUs this process may run on: its affinity, capped by a cgroup CPU quota when one is set."""
    try:
        n = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        n = float(os.cpu_count() or 1)
    for path, parse in (("/sys/fs/cgroup/cpu.max", _v2), ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", _v1)):
        try:
            quota = parse(Path(path))
        except (OSError, ValueError):
            continue
        if quota:
            n = min(n, quota)
    return max(n, 1.0)


def _v2(path: Path) -> float | None:
    parts = path.read_text().split()
    if len(parts) < 2 or parts[0] == "max":
        return None
    return float(parts[0]) / float(parts[1])


def _v1(path: Path) -> float | None:
    q = int(path.read_text().strip())
    period = int((path.parent / "cpu.cfs_period_us").read_text().strip())
    return None if q <= 0 else q / period


def _busy_cpu_s() -> float:
    import psutil

    t = psutil.cpu_times()
    return float(sum(getattr(t, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq", "steal")))


def _own_cpu_s() -> float:
    import psutil

    t = psutil.Process().cpu_times()
    return float(t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0))


def others_busy_cpus(seconds: float) -> float:
    """CPUs other processes kept busy during ``seconds`` from now (``COCKPIT_FAKE_OTHERS_CPU`` in tests)."""
    fake = os.environ.get("COCKPIT_FAKE_OTHERS_CPU")
    if fake:
        return float(fake)
    try:
        busy0, own0, t0 = _busy_cpu_s(), _own_cpu_s(), time.monotonic()
        time.sleep(seconds)
        wall = max(time.monotonic() - t0, 1e-6)
        return max(0.0, (_busy_cpu_s() - busy0) - (_own_cpu_s() - own0)) / wall
    except Exception:  # noqa: BLE001 - psutil cannot read the counters here: nothing is known to be busy
        return 0.0


@dataclass
class CpuWatch:
    """CPU time other processes used while a phase ran, measured from the system's and this process's counters."""

    wall0: float
    busy0: float
    own0: float

    @classmethod
    def start(cls) -> CpuWatch:
        return cls(time.monotonic(), _busy_cpu_s(), _own_cpu_s())

    def stop(self) -> CpuLoad:
        wall = max(time.monotonic() - self.wall0, 1e-6)
        others = max(0.0, (_busy_cpu_s() - self.busy0) - (_own_cpu_s() - self.own0)) / wall
        own = max(0.0, _own_cpu_s() - self.own0) / wall
        fake = os.environ.get("COCKPIT_FAKE_OTHERS_CPU")
        if fake:
            others = float(fake)
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        cpus = available_cpus()
        if wall < 0.25 and load1 is not None and not fake:
            others = max(others, load1 - own)  # too short to measure: the 1-minute load says more
        busy = others >= max(0.5, 0.25 * cpus)
        return {
            "cpus": cpus,
            "others_cpus": round(others, 2),
            "own_cpus": round(own, 2),
            "load1": round(load1, 2) if load1 is not None else None,
            "busy": busy,
        }


def busy_words(m: Mapping[str, object] | None) -> str:
    """ "load 8.7 on 2 CPUs" for a busy phase ("" otherwise): the load average is a count of runnable
    processes, not of CPUs, so it is named as a load; without one, the CPUs other processes used."""
    if not m or not m.get("busy"):
        return ""
    load1 = m.get("load1")
    if isinstance(load1, (int, float)):
        return f"load {load1:.1f} on {_number(m.get('cpus')):g} CPUs"
    return f"other processes used {_number(m.get('others_cpus')):.1f} of {_number(m.get('cpus')):g} CPUs"


def _number(x: object) -> float:
    """A figure of a load record (written by Cockpit, or by a probe's script: 0 when it is not a number)."""
    return float(x) if isinstance(x, (int, float)) else 0.0


# --------------------------------------------------------------------------- GPU memory of other processes


def gpu_others(own_pids: set[int] | None = None) -> list[GpuProcess]:
    """Processes other than this run holding GPU memory: gpu, pid, name (when visible), used bytes."""
    own = own_pids or {os.getpid()}
    fake = os.environ.get("COCKPIT_FAKE_GPU_PROCESSES")
    out: list[GpuProcess] = []
    if fake is not None:
        for part in fake.split(","):
            if part.strip():
                gpu, pid, name, mib = part.split(":")
                out.append({"gpu": int(gpu), "pid": int(pid), "name": name, "used": int(float(mib) * MIB)})
        return [p for p in out if p["pid"] not in own]
    for i in range(NVML.device_count() or 0):  # no driver, or no permission to list processes: nothing known
        h = NVML.handle(i)
        for p in (NVML.processes(h) if h is not None else None) or []:
            if p.pid in own:
                continue
            out.append({"gpu": i, "pid": p.pid, "name": _name(p.pid), "used": p.used})
    return out


def _name(pid: int) -> str:
    try:
        import psutil

        proc = psutil.Process(pid)
        cmd = " ".join(proc.cmdline()[:3])
        return cmd or proc.name()
    except Exception:  # noqa: BLE001 - another user's process: pid only
        return "(not visible)"


def describe_others(others: list[GpuProcess]) -> str:
    return "; ".join(
        f"GPU {p['gpu']}: pid {p['pid']} {p['name']} "
        + (f"{used / MIB:,.0f} MiB" if (used := p.get("used")) is not None else "(memory not reported)")
        for p in others
    )


# --------------------------------------------------------------------------- disk


def free_bytes(path: Path | str) -> int:
    """Free bytes on the filesystem that holds ``path`` (its nearest existing parent)."""
    fake = os.environ.get("COCKPIT_FAKE_FREE_MIB")
    if fake:
        return int(float(fake) * MIB)
    p = Path(path)
    while not p.exists() and p.parent != p:
        p = p.parent
    return int(shutil.disk_usage(p).free)
