"""The one NVML wrapper (cockpit/nvml.py): initialised once, an NVML error is an absent value, never a zero."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from cockpit import gpus, machine, nvml
from cockpit.tui.device import NO_GPU, NvmlSource


class NVMLError(Exception):
    pass


class FakeBindings:
    """A stand-in for the pynvml module: one GPU whose power reading is not supported."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self, memory_fails: bool = False) -> None:
        self.inits = 0
        self.memory_fails = memory_fails

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        if self.memory_fails:
            raise NVMLError("GPU is lost")
        return SimpleNamespace(used=3 * 2**30, total=140 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return SimpleNamespace(gpu=42)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        raise NVMLError("Not Supported")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        return 700_000

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return 51

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
        return [SimpleNamespace(pid=4242, usedGpuMemory=2**30), SimpleNamespace(pid=5151, usedGpuMemory=None)]

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86"


def test_nvml_is_initialised_once_however_many_threads_and_readers_ask() -> None:
    fake = FakeBindings()
    lib = nvml.Library(lambda: fake)
    threads = [threading.Thread(target=lambda: [lib.device_count() for _ in range(50)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    nvml.Nvml(lib).sample()
    NvmlSource(lib).read()
    assert fake.inits == 1


def test_an_unsupported_field_is_absent_and_the_others_are_read() -> None:
    reading = NvmlSource(nvml.Library(FakeBindings)).read()
    (gpu,) = reading.gpus
    assert reading.driver == "570.86"
    assert (gpu.name, gpu.used, gpu.total, gpu.util) == ("NVIDIA H200", 3 * 2**30, 140 * 2**30, 42)
    assert gpu.power_w is None and gpu.power_limit_w == 700.0 and gpu.temperature_c == 51
    assert [(p.pid, p.used) for p in gpu.processes] == [(4242, 2**30), (5151, None)]


def test_a_memory_reading_refused_part_way_is_absent_as_a_whole_never_zero() -> None:
    meter = nvml.Nvml(nvml.Library(lambda: FakeBindings(memory_fails=True)))
    assert meter.available
    assert meter.memory() is None and meter.sample() is None
    ok = nvml.Nvml(nvml.Library(FakeBindings))
    assert ok.memory() == [{"index": 0, "name": "NVIDIA H200", "used": 3 * 2**30, "total": 140 * 2**30}]


def test_missing_bindings_are_a_state_worded_by_each_reader() -> None:
    def no_bindings() -> Any:
        raise ImportError("No module named 'pynvml'")

    lib = nvml.Library(no_bindings)
    assert isinstance(lib.failure(), ImportError)
    assert lib.device_count() is None and lib.driver() is None
    assert NvmlSource(lib).read().error == f"{NO_GPU}: the NVML bindings (nvidia-ml-py) are not installed"
    pilot_side = nvml.Nvml(lib)
    assert not pilot_side.available and pilot_side.memory() is None and pilot_side.driver() is None
    assert pilot_side.error == "ImportError: No module named 'pynvml'"


def test_on_a_box_without_a_driver_every_gpu_counter_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    if nvml.NVML.failure() is None:
        pytest.skip("this machine has a working NVIDIA driver")
    monkeypatch.delenv("COCKPIT_FAKE_GPUS", raising=False)
    monkeypatch.delenv("COCKPIT_FAKE_GPU_PROCESSES", raising=False)
    pilot_side = nvml.Nvml()
    assert not pilot_side.available and pilot_side.memory() is None and pilot_side.sample() is None
    assert pilot_side.error.startswith(type(nvml.NVML.failure()).__name__)
    assert NvmlSource().read().error.startswith(NO_GPU)
    assert gpus.visible() == [] and machine.gpu_others() == []
