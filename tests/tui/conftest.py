"""Fixtures for the TUI tests: a writable copy of the recorded campaign, an app
factory with a fake device source and a launcher that starts a harmless
process instead of a pilot."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cockpit import launch, runs
from cockpit.tui.app import CockpitApp, Intervals
from cockpit.tui.device import DeviceSnapshot, GpuProcess, GpuReading, MachineFacts, StaticDeviceSource

from .support import FIXTURE

FAKE_GPU = DeviceSnapshot(
    gpus=(
        GpuReading(
            0,
            "NVIDIA L4",
            1802 * 2**20,
            23034 * 2**20,
            87,
            61.0,
            72.0,
            58,
            (GpuProcess(4242, "python", 1180 * 2**20), GpuProcess(5151, "jupyter-kernel", 512 * 2**20)),
        ),
    ),
    driver="570.86",
)
# the box beside the GPUs: r0002 (running in the fixture) is pid 4242; a forgotten kernel holds 512 MiB
FAKE_MACHINE = MachineFacts("runs", 48 * 2**30, 200 * 2**30, 2.0, 1.9, {4242: "r0002"})


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A private copy of tests/tui/fixtures/demo (tests may write to it)."""
    dest = tmp_path / "demo"
    shutil.copytree(FIXTURE, dest)
    return dest


class SleepLauncher:
    """Starts a sleeping process in its own session in place of a pilot; stops it with the real launch.stop.

    Its command line names the run folder, as a real run's does, so launch.stop recognises it as the run's.
    """

    def __init__(self) -> None:
        self.started: list[Path] = []
        self.checked: list[tuple[Path, str]] = []
        self.resumed: list[Path] = []
        self.procs: list[subprocess.Popen] = []

    def check(self, campaign: Path, variant: str) -> None:
        """The pre-start checks: recorded, not run (tests/tui/test_prestart.py runs the real ones)."""
        self.checked.append((Path(campaign), variant))

    def start(self, rdir: Path, nproc: int = 1, env: dict[str, str] | None = None, resume: bool = False) -> int:
        argv = [sys.executable, "-c", "import time; time.sleep(60)", "-m", "cockpit.pilot", str(Path(rdir).resolve())]
        argv += ["--resume"] if resume else []
        self.resumed += [rdir] if resume else []
        proc = subprocess.Popen(argv, start_new_session=True)
        self.procs.append(proc)
        runs.write_process(rdir, proc.pid, argv)
        self.started.append(rdir)
        return proc.pid

    def stop(self, rdir: Path) -> str:
        text = launch.stop(rdir, grace_s=2.0)
        for p in self.procs:
            p.poll()
        return text

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def launcher() -> Iterator[SleepLauncher]:
    fake = SleepLauncher()
    yield fake
    fake.close()


@pytest.fixture
def make_app(recorded: Path, launcher: SleepLauncher) -> Callable[..., CockpitApp]:
    def make(gpu: bool = False, **kw) -> CockpitApp:
        source = (
            StaticDeviceSource(FAKE_GPU, FAKE_MACHINE)
            if gpu
            else StaticDeviceSource(
                DeviceSnapshot(error="no NVIDIA GPU: NVML Shared Library Not Found (no NVIDIA driver on this machine)")
            )
        )
        timing = kw.pop("timing", Intervals(events_s=0.05, runs_s=0.5, notebook_s=0.2, device_s=0.5))
        app = CockpitApp(kw.pop("campaign", recorded), device_source=source, launcher=launcher, timing=timing, **kw)
        asked: list[str] = []
        notify = app.notify

        def recorded_notify(message: str, *, title: str = "", **kw: Any) -> None:
            asked.append(f"{title} {message}")
            notify(message, title=title, **kw)

        app.notify = recorded_notify  # every notification asked for, kept after its toast expires (said())
        app.asked = asked
        return app

    return make
