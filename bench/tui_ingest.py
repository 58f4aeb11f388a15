"""Does a pilot writing 10,000 events a second freeze the TUI?

A writer process appends events to a run's events.jsonl at a fixed rate
(samples mostly, with steps, logs and a gate every second), while the TUI
shows that run live (headless, 120x40: every frame is composed as on a real
terminal, only the final write is skipped). Measured per scenario:

- frame interval: time between screen updates actually produced;
- input latency: time for a message posted to the screen to be handled,
  every 50 ms (what a key press waits for);
- ingest: events the TUI read per second against events written, and the
  backlog left when the writer stops.

Scenarios: idle (no writer), bounded (the shipped settings: each 0.1 s tick
reads the run's shared reader for at most 20 ms, decimating samples while
behind) and unbounded (the same reader decoding everything available at each
tick: what the budget protects against). The target is a frame interval p95
under 100 ms in the bounded scenario.

Run: ``.venv/bin/python bench/tui_ingest.py [--seconds 6] [--rate 10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAME_TARGET_MS = 100  # issue 15: the frame interval p95 at 10,000 events/s
FIXTURE = ROOT / "tests" / "tui" / "fixtures" / "demo"

WRITER = r"""
import sys, time
from cockpit import events as ev
path, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
w = ev.EventWriter(path)
w.emit(ev.RUN_START, run_id="r0003", variant="lr1e-4", seed=0, phases=list(ev.PHASES),
       stack={"gpus": [{"index": 0, "name": "bench", "total": 24 * 2**30}]})
per_tick, tick = rate // 100, 0.01
t0 = time.perf_counter(); n = 0; k = 0
while time.perf_counter() - t0 < seconds:
    for _ in range(per_tick):
        n += 1
        if n % 500 == 0:
            w.emit(ev.LOG, level="info", message=f"event {n}")
        elif n % 50 == 0:
            w.emit(ev.STEP, step=n // 50, loss=4.0 / (1 + n / 1e5), lr=1e-4, grad_norm=1.0, phase="overfit")
        elif n % rate == 0:
            phase = ev.PHASES[k % len(ev.PHASES)]; k += 1
            w.emit(ev.PHASE_START, phase=phase, inputs={})
            w.emit(ev.GATE, phase=phase, verdict="pass", checks=[], duration_s=1.0,
                   mem={"torch": {"peak_reserved": (1 + k) * 2**28}, "nvml": None, "rss": 2**30})
        else:
            w.emit(ev.SAMPLE, phase="overfit", rss=2**30 + n,
                   nvml=[{"index": 0, "used": 2**30 + (n % 977) * 2**20, "total": 24 * 2**30, "util": 90}],
                   torch={"allocated": 2**29 + n % 1000, "reserved": 2**30})
    target = t0 + tick * (n // per_tick)
    delay = target - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
w.close()
print(n + 1, time.perf_counter() - t0)
"""


async def scenario(name: str, seconds: float, rate: int, bounded: bool = True) -> dict:
    from textual.message import Message

    from cockpit import runs
    from cockpit.tui.app import CockpitApp
    from cockpit.tui.device import StaticDeviceSource
    from cockpit.tui.screens.run import RunScreen

    tmp = Path(tempfile.mkdtemp(prefix="cockpit-bench-"))
    campaign = tmp / "demo"
    shutil.copytree(FIXTURE, campaign)
    rid, rdir = runs.create_run(campaign, "lr1e-4", 0)
    events_path = rdir / "events.jsonl"
    events_path.touch()

    frames: list[float] = []

    class Ping(Message):
        def __init__(self) -> None:
            super().__init__()
            self.sent = time.perf_counter()

    latencies: list[float] = []

    class BenchRunScreen(RunScreen):
        def on_ping(self, message: Ping) -> None:  # noqa: D401 - message handler
            latencies.append(time.perf_counter() - message.sent)

    class BenchApp(CockpitApp):
        def _display(self, screen, renderable) -> None:  # type: ignore[override]
            if renderable is not None and not self._batch_count:
                frames.append(time.perf_counter())
            super()._display(screen, renderable)

    app = BenchApp(campaign, device_source=StaticDeviceSource(), watch=False)
    writer = None
    async with app.run_test(size=(120, 40)) as pilot:
        screen = BenchRunScreen(rid)
        await app.push_screen(screen)
        while app.feeds.get(rid) is None:  # the run's reader is read in a worker first
            await pilot.pause(0.05)
        if not bounded:  # the same reader, decoding everything available at every tick
            app.feeds.budget_s = 3600.0
            feed = app.feeds.get(rid)
            assert feed is not None
            feed.decimate = False
        await pilot.pause(0.5)
        frames.clear()
        t0 = time.perf_counter()
        if rate:
            writer = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(events_path), str(rate), str(seconds)],
                stdout=subprocess.PIPE,
                text=True,
            )
        while time.perf_counter() - t0 < seconds:
            screen.post_message(Ping())
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - t0
        written, wrote_s = (0, elapsed)
        if writer is not None:
            out, _ = writer.communicate(timeout=60)
            written, wrote_s = int(out.split()[0]), float(out.split()[1])
        feed = screen.feed
        assert feed is not None
        read = feed.lines_read
        decoded = feed.events_read
        backlog = feed.behind_bytes
    shutil.rmtree(tmp, ignore_errors=True)
    gaps = [b - a for a, b in zip(frames, frames[1:], strict=False)]
    return {
        "name": name,
        "frames": len(frames),
        "gap_p50": statistics.median(gaps) if gaps else None,
        "gap_p95": _pct(gaps, 95),
        "gap_max": max(gaps) if gaps else None,
        "lat_p50": statistics.median(latencies) if latencies else None,
        "lat_p95": _pct(latencies, 95),
        "lat_max": max(latencies) if latencies else None,
        "written_per_s": written / wrote_s if written else 0.0,
        "read_per_s": read / elapsed,
        "decoded_per_s": decoded / elapsed,
        "backlog_mib": backlog / 2**20,
    }


def _pct(values: list[float], p: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rate", type=int, default=10_000, help="events per second written")
    args = parser.parse_args()
    results = [
        asyncio.run(scenario("idle", args.seconds, 0)),
        asyncio.run(scenario("bounded", args.seconds, args.rate)),
        asyncio.run(scenario("unbounded", args.seconds, args.rate, bounded=False)),
    ]
    print(f"TUI under a writer of {args.rate:,} events/s for {args.seconds:g} s (120x40, headless)")
    print(
        f"{'scenario':<9} {'frames':>6} {'frame gap ms p50/p95/max':>27} {'input latency ms p50/p95/max':>30}"
        f" {'written/s':>10} {'read/s':>9} {'decoded/s':>9} {'backlog MiB':>11}"
    )
    for r in results:
        print(
            f"{r['name']:<9} {r['frames']:>6} {_ms(r['gap_p50'])}/{_ms(r['gap_p95'])}/{_ms(r['gap_max'])}"
            f"  {_ms(r['lat_p50'])}/{_ms(r['lat_p95'])}/{_ms(r['lat_max'])}"
            f" {r['written_per_s']:>10,.0f} {r['read_per_s']:>9,.0f} {r['decoded_per_s']:>9,.0f}"
            f" {r['backlog_mib']:>11.2f}"
        )
    idle, bounded, unbounded = results
    if bounded["lat_p95"] and bounded["gap_p50"]:
        print(
            f"input latency p95: bounded {bounded['lat_p95'] * 1000:.0f} ms"
            f" = {bounded['lat_p95'] / max(idle['lat_p95'] or 1e-9, 1e-9):.1f}x idle;"
            f" unbounded / bounded: {(unbounded['lat_p95'] or 0) / bounded['lat_p95']:.1f}x"
        )
        print(
            f"frame interval p50: bounded {bounded['gap_p50'] * 1000:.0f} ms;"
            f" unbounded / bounded: {(unbounded['gap_p50'] or 0) / bounded['gap_p50']:.1f}x"
        )
    if bounded["gap_p95"] is not None:
        p95 = bounded["gap_p95"] * 1000
        print(
            f"frame interval p95 under {args.rate:,} events/s: {p95:.0f} ms "
            f"(target < {FRAME_TARGET_MS} ms: {'met' if p95 < FRAME_TARGET_MS else 'NOT met'})"
        )
    if bounded["written_per_s"]:
        print(
            f"lines read / written: bounded {bounded['read_per_s'] / bounded['written_per_s']:.2f},"
            f" unbounded {unbounded['read_per_s'] / max(unbounded['written_per_s'], 1):.2f}"
        )


if __name__ == "__main__":
    main()
