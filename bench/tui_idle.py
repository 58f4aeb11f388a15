"""Does an idle TUI burn a core while a pilot with a large events.jsonl runs?

A run whose events.jsonl already holds ``--mib`` MiB (an hour of samples is
about 16 MiB; the target is set at 100 MiB) keeps running: a writer process
appends what a pilot writes while it trains (samples at 20 Hz, a step and a
log line every second) and is recorded as the run's process, so the TUI sees
it alive. The TUI runs headless in a fresh interpreter at 120x40 and reports:

- CPU: process time (every thread) over ``--seconds`` of wall time, as a share
  of one core, on the campaign screen and on the running run's own screen,
  once the run's history has been read (a one-time read, timed apart); the
  two screens are measured in turn ``--rounds`` times and the median printed
  with the range (a shared machine's slow moments hit both alike);
- key latency: from a key event sent as the terminal sends it until its effect
  is in the app's state (the table's cursor moved, the help screen open or
  closed), median and p95 (arrows on the campaign table and the run's gate
  table; ``?`` and Escape);
- ready: from start until the running run's row says "running", and until
  its history is read.

Then the campaign screen of ``--runs`` finished runs (default 1000, the campaign
``bench/tui_scale.py`` makes), nothing running: its CPU over ``--seconds``.

Targets (issue 15): idle CPU under 3 % of a core, key latency p95 under 100 ms.
``--code DIR`` runs the same against another checkout (e.g. the code before the
change, unpacked with ``git archive``) for a before/after figure.

Run: ``.venv/bin/python bench/tui_idle.py [--mib 100] [--seconds 10] [--rounds 3] [--code DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "tui" / "fixtures" / "demo"
CPU_TARGET = 0.03
LATENCY_TARGET_S = 0.100

WRITER = r"""
import json, sys, time
path = sys.argv[1]
t = time.time(); k = 0
with open(path, "a", encoding="utf-8", buffering=1) as fh:
    while True:
        for i in range(20):
            fh.write(json.dumps({"v": 1, "t": time.time(), "kind": "sample", "phase": "overfit", "rss": 2**30 + i,
                                 "nvml": [{"index": 0, "used": 2**30 + i * 2**20, "total": 24 * 2**30, "util": 90}],
                                 "torch": {"allocated": 2**29, "reserved": 2**30}}, separators=(",", ":")) + "\n")
            time.sleep(0.05)
        k += 1
        fh.write(json.dumps({"v": 1, "t": time.time(), "kind": "step", "step": k, "loss": 4.0 / k, "lr": 1e-4,
                             "grad_norm": 1.0, "duration_s": 0.9, "phase": "overfit"}, separators=(",", ":")) + "\n")
        fh.write(json.dumps({"v": 1, "t": time.time(), "kind": "log", "level": "info", "message": f"step {k}"},
                            separators=(",", ":")) + "\n")
"""

CHILD = r"""
import asyncio, json, statistics, sys, time
t_start = time.perf_counter()
from cockpit.tui.app import CockpitApp
from cockpit.tui.device import StaticDeviceSource

campaign, rid, seconds, rounds = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])


def text(app):
    return "\n".join(s.text for s in app.screen._compositor.render_strips())


async def cpu_over(pilot, seconds):
    c0, w0 = time.process_time(), time.perf_counter()
    await pilot.pause(seconds)
    return (time.process_time() - c0) / (time.perf_counter() - w0)


async def key(app, name, char=None):
    # one key as the terminal sends it; the time until its effect is in the app's state
    from textual import events

    screen = app.screen
    focused = screen.focused
    before = (type(app.screen), getattr(focused, "cursor_row", None))
    event = events.Key(name, char)
    event.set_sender(app)
    t0 = time.perf_counter()
    app._driver.send_message(event)
    while (type(app.screen), getattr(app.screen.focused, "cursor_row", None)) == before:
        if time.perf_counter() - t0 > 10:
            raise SystemExit(f"key {name} had no effect in 10 s")
        await asyncio.sleep(0.001)
    took = time.perf_counter() - t0
    await asyncio.sleep(0.02)  # not a burst: one key after another, as typed
    return took


async def timed(pilot, *keys):
    out = []
    for name in keys:
        out.append(await key(pilot.app, name, "?" if name == "question_mark" else None))
    return out


async def main():
    app = CockpitApp(campaign, device_source=StaticDeviceSource(), watch=True)
    res = {"cpu_campaign": [], "cpu_run": []}
    async with app.run_test(size=(120, 40)) as pilot:
        while "running" not in text(app):
            if time.perf_counter() - t_start > 300:
                raise SystemExit("the running run never showed as running")
            await pilot.pause(0.05)
        res["ready_s"] = time.perf_counter() - t_start
        while rid not in app.feeds.ids:  # its history read (once, in a thread): then it is idle
            await pilot.pause(0.05)
        res["history_s"] = time.perf_counter() - t_start
        for round_ in range(rounds):  # back and forth: a slow moment of a shared machine hits both screens
            await pilot.pause(2.0)  # let the reads after a screen change settle
            res["cpu_campaign"].append(await cpu_over(pilot, seconds))
            if round_ == 0:
                lat = []
                for _ in range(10):
                    lat += await timed(pilot, "down", "down", "up", "up")
                res["keys_campaign"] = lat
                help_lat = []
                for _ in range(5):
                    help_lat += await timed(pilot, "question_mark", "escape")
                res["keys_help"] = help_lat
            await pilot.press("end")
            t0 = time.perf_counter()
            await pilot.press("enter")
            while rid not in text(app) or "running" not in text(app) or "RunScreen" not in type(app.screen).__name__:
                await pilot.pause(0.02)
            if round_ == 0:
                res["open_run_s"] = time.perf_counter() - t0
            await pilot.pause(2.0)
            res["cpu_run"].append(await cpu_over(pilot, seconds))
            if round_ == 0:
                lat = []
                for _ in range(10):
                    lat += await timed(pilot, "down", "up")
                res["keys_run"] = lat
            await pilot.press("escape")
    print("RESULT " + json.dumps(res))


asyncio.run(main())
"""


def make_campaign(mib: float) -> tuple[Path, str, Path]:
    from cockpit import runs

    tmp = Path(tempfile.mkdtemp(prefix="cockpit-idle-"))
    campaign = tmp / "demo"
    shutil.copytree(FIXTURE, campaign)
    rid, rdir = runs.create_run(campaign, "lr1e-4", 0)
    t0 = time.time() - 3600
    head = [
        {
            "v": 1,
            "t": t0,
            "kind": "run_start",
            "run_id": rid,
            "variant": "lr1e-4",
            "seed": 0,
            "run_kind": "pilot",
            "phases": [
                "stack",
                "data",
                "leakage",
                "forward",
                "backward",
                "update_first",
                "update_second",
                "accumulation",
                "worst_case",
                "overfit",
                "validation",
                "save",
                "resume",
                "export",
            ],
            "stack": {"gpus": [{"index": 0, "name": "bench", "total": 24 * 2**30}]},
            "world": 1,
        },
        {"v": 1, "t": t0 + 1, "kind": "phase_start", "phase": "overfit", "inputs": {}},
    ]
    target = int(mib * 2**20)
    with open(rdir / "events.jsonl", "w", encoding="utf-8") as fh:
        for e in head:
            fh.write(json.dumps(e, separators=(",", ":")) + "\n")
        written, i, t = 0, 0, t0 + 2
        block = []
        while written < target:
            i += 1
            t += 0.05
            line = (
                json.dumps(
                    {
                        "v": 1,
                        "t": round(t, 3),
                        "kind": "sample",
                        "phase": "overfit",
                        "rss": 2**30 + i,
                        "nvml": [{"index": 0, "used": 2**30 + (i % 977) * 2**20, "total": 24 * 2**30, "util": 90}],
                        "torch": {"allocated": 2**29 + i % 1000, "reserved": 2**30},
                    },
                    separators=(",", ":"),
                )
                + "\n"
            )
            if i % 20 == 0:
                line += (
                    json.dumps(
                        {
                            "v": 1,
                            "t": round(t, 3),
                            "kind": "step",
                            "step": i // 20,
                            "loss": 4.0 / (1 + i / 1e5),
                            "lr": 1e-4,
                            "grad_norm": 1.0,
                            "duration_s": 0.9,
                            "phase": "overfit",
                        },
                        separators=(",", ":"),
                    )
                    + "\n"
                )
            block.append(line)
            written += len(line)
            if len(block) >= 10000:
                fh.write("".join(block))
                block = []
        fh.write("".join(block))
    return campaign, rid, rdir


MANY = r"""
import asyncio, json, sys, time
from cockpit.tui.app import CockpitApp
from cockpit.tui.device import StaticDeviceSource


async def main():
    app = CockpitApp(sys.argv[1], device_source=StaticDeviceSource(), watch=True)
    async with app.run_test(size=(120, 40)) as pilot:
        while len(getattr(app.screen, "states", ())) < int(sys.argv[2]):
            await pilot.pause(0.1)
        await pilot.pause(3.0)  # the first reading of every folder, and the comparison read ahead
        c0, w0 = time.process_time(), time.perf_counter()
        await pilot.pause(float(sys.argv[3]))
        print("RESULT " + json.dumps({"cpu": (time.process_time() - c0) / (time.perf_counter() - w0)}))


asyncio.run(main())
"""


def idle_many(n: int, seconds: float, code: str | None) -> float:
    """CPU of the idle campaign screen of ``n`` finished runs (the campaign bench/tui_scale.py makes)."""
    sys.path.insert(0, str(ROOT))
    from bench.tui_scale import many_runs

    campaign = many_runs(n)
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = str(Path(code).resolve())
    out = subprocess.run(
        [sys.executable, "-c", MANY, str(campaign), str(n), str(seconds)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=code or ROOT,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        print(out.stdout[-2000:], out.stderr[-4000:])
        raise SystemExit(1)
    return float(json.loads(line[len("RESULT ") :])["cpu"])


def pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=100.0, help="size of the running run's events.jsonl")
    parser.add_argument("--seconds", type=float, default=10.0, help="idle time measured on each screen, each round")
    parser.add_argument("--rounds", type=int, default=3, help="campaign screen, run screen, back: how many times")
    parser.add_argument("--code", help="a checkout of Cockpit to measure instead of this one")
    parser.add_argument("--runs", type=int, default=1000, help="finished runs of the idle campaign (0: skip)")
    args = parser.parse_args()
    from cockpit import runs

    campaign, rid, rdir = make_campaign(args.mib)
    size = (rdir / "events.jsonl").stat().st_size
    # the command line ends as a run's does (`-m cockpit.pilot RUN_DIR`): Cockpit counts only its own runs as running
    argv = [sys.executable, "-c", WRITER, str(rdir / "events.jsonl"), "-m", "cockpit.pilot", str(rdir.resolve())]
    writer = subprocess.Popen(argv, start_new_session=True)
    runs.write_process(rdir, writer.pid, argv)
    env = dict(os.environ)
    if args.code:
        env["PYTHONPATH"] = str(Path(args.code).resolve())
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(campaign), rid, str(args.seconds), str(args.rounds)],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            cwd=args.code or ROOT,
        )
    finally:
        writer.kill()
        writer.wait()
        shutil.rmtree(campaign.parent, ignore_errors=True)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        print(out.stdout[-2000:], out.stderr[-4000:])
        raise SystemExit(1)
    r = json.loads(line[len("RESULT ") :])
    keys = r["keys_campaign"] + r["keys_run"]
    print(
        f"idle TUI with a running run of {size / 2**20:.0f} MiB of events ({os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}){' code: ' + args.code if args.code else ''}"
    )
    print(
        f"ready (its row says running): {r['ready_s']:.2f} s; its history read: {r['history_s']:.2f} s; "
        f"opening the running run: {r['open_run_s'] * 1000:.0f} ms"
    )
    for name, key in (("campaign screen", "cpu_campaign"), ("running run's own screen", "cpu_run")):
        cpus = sorted(r[key])
        cpu = cpus[len(cpus) // 2]
        print(
            f"CPU on the {name}: {cpu * 100:.1f} % of a core, median of {len(cpus)} x {args.seconds:g} s "
            f"(range {cpus[0] * 100:.1f}-{cpus[-1] * 100:.1f} %)  "
            f"(target < {CPU_TARGET * 100:.0f} %: {'met' if cpu < CPU_TARGET else 'NOT met'})"
        )
    p95 = pct(keys, 95)
    print(
        f"key latency (arrows): median {1000 * sorted(keys)[len(keys) // 2]:.0f} ms, p95 {1000 * p95:.0f} ms  "
        f"(target < {LATENCY_TARGET_S * 1000:.0f} ms: {'met' if p95 < LATENCY_TARGET_S else 'NOT met'})"
    )
    print(f"? then Escape: p95 {1000 * pct(r['keys_help'], 95):.0f} ms per key")
    if args.runs:
        cpu = idle_many(args.runs, args.seconds, args.code)
        print(
            f"CPU on the campaign screen of {args.runs} finished runs, nothing running: {cpu * 100:.1f} % of a core  "
            f"(target < {CPU_TARGET * 100:.0f} %: {'met' if cpu < CPU_TARGET else 'NOT met'})"
        )


if __name__ == "__main__":
    main()
