"""The measurements bench/gpu_check.py takes inside a child interpreter (each prints one JSON object): the machine's
CUDA context and counter costs, the sampler's rate and CPU cost, and the TUI rendered headless. A child, so the
check's own process never holds a CUDA context that every NVML reading of the runs would count.

    python bench/gpu_inner.py machine | sampler | tui CAMPAIGN RUN OUT_TEXT
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MIB = 2**20


def mib(b: int | float | None) -> float | None:
    return None if b is None else round(b / MIB, 1)


def inner_machine() -> dict[str, Any]:
    import torch

    from cockpit import nvml

    r: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    lib = nvml.NVML
    handle = lib.handle(0) if lib.available and lib.device_count() else None
    if handle is None:
        r["nvml_error"] = repr(lib.failure()) if lib.failure() else "no GPU through NVML"

    def used() -> int | None:
        m = lib.memory(handle) if handle is not None else None
        return m.used if m is not None else None

    before = used()
    if not torch.cuda.is_available():
        r["cuda_available"] = False
        return r
    t = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    r["cuda_init_s"] = round(time.perf_counter() - t, 3)
    r["device"] = torch.cuda.get_device_name(0)
    free, total = torch.cuda.mem_get_info()
    r["total_bytes"] = total
    r["free_mib_after_init"] = mib(free)
    after = used()
    if before is not None and after is not None:
        r["nvml_before_init_mib"], r["nvml_after_init_mib"] = mib(before), mib(after)
        r["cuda_context_mib"] = mib(after - before - torch.cuda.memory_reserved())
        # what a training step loads beyond a bare context (cuBLAS and cuBLASLt handles and workspaces, the attention
        # and loss kernels' modules): NVML beyond torch's reserved after a bf16 matmul, attention and a backward
        x = torch.randn(8, 128, 768, device="cuda", requires_grad=True)
        w = torch.randn(768, 768, device="cuda", requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = (x @ w).view(8, 128, 12, 64).transpose(1, 2)
            y = torch.nn.functional.scaled_dot_product_attention(h, h, h, is_causal=True)
            loss = torch.nn.functional.cross_entropy(
                y.reshape(-1, 64).float(), torch.zeros(8 * 12 * 128, dtype=torch.long, device="cuda")
            )
        loss.backward()
        torch.cuda.synchronize()
        later = used()
        if later is not None:
            r["beyond_torch_after_a_step_mib"] = mib(later - before - torch.cuda.memory_reserved())
    procs = lib.processes(handle) if handle is not None else None
    r["nvml_processes"] = None if procs is None else [{"pid": p.pid, "used_mib": mib(p.used)} for p in procs]
    r["own_pid"] = os.getpid()
    costs = {}
    calls: list[tuple[str, Callable[[], object]]] = [
        ("torch.cuda.memory_allocated", torch.cuda.memory_allocated),
        ("torch.cuda.memory_stats", torch.cuda.memory_stats),
        ("torch.cuda.synchronize", torch.cuda.synchronize),
    ]
    if handle is not None:
        calls.append(("NVML memory", lambda: lib.memory(handle)))
        calls.append(("NVML utilization", lambda: lib.utilization(handle)))
    for name, fn in calls:
        t = time.perf_counter()
        for _ in range(1000):
            fn()
        costs[name] = round((time.perf_counter() - t) * 1e3, 2)  # us per call: 1000 calls, in ms
    r["us_per_call"] = costs
    return r


def inner_sampler() -> dict[str, Any]:
    import psutil
    import torch

    from cockpit.pilot.meter import Meter
    from cockpit.pilot.trainer import resolve_device

    device = resolve_device("auto")
    if device.type == "cuda":
        torch.zeros(1, device=device)
    got: list[str] = []
    meter = Meter(device, emit=lambda kind, **_: got.append(kind))
    proc = psutil.Process()
    seconds = 5.0
    cpu0, t0 = sum(proc.cpu_times()[:2]), time.perf_counter()
    meter.start_sampler()
    time.sleep(seconds)
    meter.stop_sampler()
    wall, cpu = time.perf_counter() - t0, sum(proc.cpu_times()[:2]) - cpu0
    n = len(got)
    return {
        "device": str(device),
        "nominal_hz": 20.0,
        "achieved_hz": round(n / wall, 2),
        "samples": n,
        "cpu_share_of_one_core": round(cpu / wall, 4),
        "cpu_ms_per_sample": round(cpu / n * 1e3, 3) if n else None,
    }


def inner_tui(campaign: str, run: str, out: str) -> dict[str, Any]:
    import asyncio

    from cockpit.tui.app import CockpitApp

    texts: dict[str, str] = {}

    def text(app: Any) -> str:
        return "\n".join(s.text.rstrip() for s in app.screen._compositor.render_strips())

    async def wait(pilot: Any, app: Any, needle: str, limit: float = 20.0) -> bool:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            await pilot.pause(0.2)
            if needle in text(app):
                return True
        return False

    async def main() -> dict[str, Any]:
        app = CockpitApp(campaign, watch=False)
        seen = {}
        async with app.run_test(size=(160, 50)) as pilot:
            seen["campaign"] = await wait(pilot, app, run)
            texts["campaign"] = text(app)
            app.open_run(run)
            seen["run"] = await wait(pilot, app, "worst_case")
            await pilot.pause(1.0)
            texts["run"] = text(app)
            app.action_device()
            seen["gpus"] = await wait(pilot, app, "GPU", 10.0)
            await pilot.pause(2.0)  # one more NVML reading
            texts["gpus"] = text(app)
        return seen

    seen = asyncio.run(main())
    Path(out).write_text("".join(f"===== {k}\n{v}\n\n" for k, v in texts.items()))
    return {"shown": seen, "lines": {k: len(v.splitlines()) for k, v in texts.items()}}


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    fn = {"machine": inner_machine, "sampler": inner_sampler, "tui": inner_tui}[kind]
    print(json.dumps(fn(*rest)))
