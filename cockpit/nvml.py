"""The one module that touches NVML (the nvidia-ml-py bindings), in the manner of nvitop's ``api/libnvml.py``.

The library is loaded and initialised lazily, once, under a lock. Every query is wrapped: an NVML error (an
unsupported field, a GPU that fell off the bus, no permission) gives ``None``, "not available", never an exception
and never a made-up zero. A missing library or driver is a state, :meth:`Library.failure`, that callers word as
they need. No torch and no textual: the pilot, the CLI and the TUI all read the GPUs through here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .schema import GpuMemory, GpuSample


@dataclass(frozen=True)
class Memory:
    used: int  # bytes
    total: int


@dataclass(frozen=True)
class ProcessUse:
    """A process holding memory on a GPU: ``used`` is None where the driver does not say (MIG, no permission)."""

    pid: int
    used: int | None


def _import_pynvml() -> Any:
    import pynvml  # nvidia-ml-py

    return pynvml


def text(value: Any) -> str:
    """NVML's strings are bytes in older bindings, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


class Library:
    """NVML, initialised on first use. ``load`` returns the bindings module (tests hand in a stand-in)."""

    def __init__(self, load: Callable[[], Any] = _import_pynvml) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._tried = False
        self._nv: Any = None
        self._failure: BaseException | None = None
        self.last_error: BaseException | None = None  # the latest query's error: for a message, never a value

    def _init(self) -> Any:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    nv = self._load()
                    nv.nvmlInit()
                    self._nv = nv
                except Exception as exc:  # ImportError, pynvml.NVMLError and its many subclasses
                    self._failure = exc
            return self._nv

    def failure(self) -> BaseException | None:
        """Why NVML cannot be used here (no bindings, no driver), or None when it can."""
        self._init()
        return self._failure

    @property
    def available(self) -> bool:
        return self._init() is not None

    def query(self, name: str, *args: Any) -> Any | None:
        """``pynvml.<name>(*args)``, or None when NVML is unusable or the call fails (kept in ``last_error``)."""
        nv = self._init()
        if nv is None:
            self.last_error = self._failure
            return None
        try:
            return getattr(nv, name)(*args)
        except Exception as exc:  # pynvml.NVMLError: the field is not available
            self.last_error = exc
            return None

    def constant(self, name: str) -> Any | None:
        nv = self._init()
        return getattr(nv, name, None) if nv is not None else None

    # ---------------------------------------------------------------- the queries Cockpit makes

    def device_count(self) -> int | None:
        n = self.query("nvmlDeviceGetCount")
        return int(n) if n is not None else None

    def handle(self, index: int) -> Any | None:
        return self.query("nvmlDeviceGetHandleByIndex", index)

    def name(self, handle: Any) -> str | None:
        v = self.query("nvmlDeviceGetName", handle)
        return text(v) if v is not None else None

    def memory(self, handle: Any) -> Memory | None:
        info = self.query("nvmlDeviceGetMemoryInfo", handle)
        return Memory(int(info.used), int(info.total)) if info is not None else None

    def utilization(self, handle: Any) -> int | None:
        rates = self.query("nvmlDeviceGetUtilizationRates", handle)
        return int(rates.gpu) if rates is not None else None

    def power_w(self, handle: Any) -> float | None:
        mw = self.query("nvmlDeviceGetPowerUsage", handle)
        return mw / 1000.0 if mw is not None else None

    def power_limit_w(self, handle: Any) -> float | None:
        mw = self.query("nvmlDeviceGetEnforcedPowerLimit", handle)
        return mw / 1000.0 if mw is not None else None

    def temperature_c(self, handle: Any) -> int | None:
        sensor = self.constant("NVML_TEMPERATURE_GPU")
        return self.query("nvmlDeviceGetTemperature", handle, sensor) if sensor is not None else None

    def processes(self, handle: Any) -> list[ProcessUse] | None:
        procs = self.query("nvmlDeviceGetComputeRunningProcesses", handle)
        if procs is None:
            return None
        used = [getattr(p, "usedGpuMemory", None) for p in procs]
        return [ProcessUse(int(p.pid), int(u) if u is not None else None) for p, u in zip(procs, used, strict=True)]

    def driver(self) -> str | None:
        v = self.query("nvmlSystemGetDriverVersion")
        return text(v) if v is not None else None


NVML = Library()  # the process's one NVML, as nvitop keeps one


def visible_indices(count: int) -> list[int]:
    """NVML indices of CUDA_VISIBLE_DEVICES (numeric form), else all."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is None or vis.strip() == "":
        return list(range(count)) if vis is None else []
    out = []
    for part in vis.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < count:
            out.append(int(part))
        elif not part.isdigit():  # UUIDs or MIG names: cannot map cheaply, show every GPU
            return list(range(count))
    return out


class Nvml:
    """The GPUs this process may see, with the pilot's readings of them, or ``available = False``.

    A reading that NVML refuses part-way is absent (None) as a whole, never a list with made-up figures.
    """

    def __init__(self, library: Library = NVML) -> None:
        self.lib = library
        self.available = False
        self.handles: list[tuple[int, Any]] = []
        self.names: list[str] = []
        self.error = ""
        failure = library.failure()
        if failure is not None:  # no driver, no library: GPU counters are absent
            self.error = f"{type(failure).__name__}: {failure}"
            return
        count = library.device_count()
        if count is None:
            self.error = _worded(library.last_error)
            return
        for i in visible_indices(count):
            h = library.handle(i)
            name = library.name(h) if h is not None else None
            if h is None or name is None:
                self.handles, self.names = [], []
                self.error = _worded(library.last_error)
                return
            self.handles.append((i, h))
            self.names.append(name)
        self.available = bool(self.handles)
        if not self.available:
            self.error = "NVML reports no GPU"

    def memory(self) -> list[GpuMemory] | None:
        if not self.available:
            return None
        out: list[GpuMemory] = []
        for (i, h), name in zip(self.handles, self.names, strict=True):
            mem = self.lib.memory(h)
            if mem is None:
                return None
            out.append({"index": i, "name": name, "used": mem.used, "total": mem.total})
        return out

    def sample(self) -> list[GpuSample] | None:
        if not self.available:
            return None
        out: list[GpuSample] = []
        for i, h in self.handles:
            mem = self.lib.memory(h)
            if mem is None:
                return None
            out.append({"index": i, "used": mem.used, "total": mem.total, "util": self.lib.utilization(h)})
        return out

    def driver(self) -> str | None:
        return self.lib.driver() if self.available else None


def _worded(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}" if exc is not None else "NVML gave no answer"
