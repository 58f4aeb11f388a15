"""Does the TUI stay quick with a thousand runs, and paint before a huge notebook is parsed?

Campaigns are the recorded fixture grown by ``tests/tui/scenarios.py``:

- ``--runs N`` (default 1000): N runs in all (series runs over every variant
  and many seeds, some diverged or crashed), each with its events, curve and
  metrics; kept in the system's temporary folder between runs of the bench;
- ``--decisions N`` (default 200,000): the fixture with N ``[[decisions]]``
  appended (a 24 MB campaign.toml that takes about 35 s to parse whole).

Each is opened in a fresh interpreter, headless at 120x40, and timed from the
process start:

- first paint: the campaign screen on screen with its runs table filled (from
  the notebook) or, for the huge notebook, the question shown;
- states: every run's status read from its folder;
- compare: from pressing C (once the states are read) until the quality table
  is on screen, and then l until the curves are drawn;
- for the huge notebook, when the whole file has been read in the background.

Targets (issue 15): first paint under 0.3 s and compare under 0.5 s with 1,000
runs. ``--code DIR`` measures another checkout (before/after).

Run: ``.venv/bin/python bench/tui_scale.py [--runs 1000] [--decisions 200000] [--code DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
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
PAINT_TARGET_S = 0.3
COMPARE_TARGET_S = 0.5

CHILD = r"""
import asyncio, json, sys, time
t0 = time.perf_counter()
from cockpit.tui.app import CockpitApp
from cockpit.tui.device import StaticDeviceSource
t_import = time.perf_counter() - t0
campaign, mode, first_id = sys.argv[1], sys.argv[2], sys.argv[3]


def text(app):
    return "\n".join(s.text for s in app.screen._compositor.render_strips())


async def until(pilot, predicate, limit=600.0):
    start = time.perf_counter()
    while not predicate():
        if time.perf_counter() - start > limit:
            raise SystemExit("timed out")
        await asyncio.sleep(0.005)
    return time.perf_counter() - t0


async def main():
    app = CockpitApp(campaign, device_source=StaticDeviceSource(), watch=False)
    res = {"import_s": t_import}
    async with app.run_test(size=(120, 40)) as pilot:
        if mode == "runs":
            res["paint_s"] = await until(pilot, lambda: first_id in text(app))
            res["states_s"] = await until(pilot, lambda: len(app.screen.states) >= int(sys.argv[4]))
            await pilot.pause(0.5)
            t1 = time.perf_counter()
            await pilot.press("C")
            await until(pilot, lambda: "across seeds" in text(app))
            res["compare_s"] = time.perf_counter() - t1
            t1 = time.perf_counter()
            await pilot.press("l")
            plot = app.screen.query_one("#curve-plot")
            await until(pilot, lambda: bool(plot.lines) and "reading" not in text(app))
            res["curves_s"] = time.perf_counter() - t1
            await pilot.press("escape")
            await pilot.pause(0.3)
            t1 = time.perf_counter()
            await pilot.press("C")
            await until(pilot, lambda: "across seeds" in text(app))
            res["compare_again_s"] = time.perf_counter() - t1
        else:
            question = first_id
            res["paint_s"] = await until(pilot, lambda: question in text(app))
            res["whole_s"] = await until(
                pilot, lambda: not getattr(app, "notebook_partial", False) and len(app.notebook.decisions) > 1000
            )
    print("RESULT " + json.dumps(res))


asyncio.run(main())
"""


def fixture_key() -> str:
    h = hashlib.sha256()
    for p in sorted(FIXTURE.rglob("*")):
        if p.is_file():
            h.update(p.name.encode())
            h.update(str(p.stat().st_size).encode())
    return h.hexdigest()[:12]


def many_runs(n: int) -> Path:
    """The fixture grown to ``n`` runs, made once and kept in the temporary folder."""
    place = Path(tempfile.gettempdir()) / f"cockpit-bench-runs-{n}-{fixture_key()}" / "demo"
    if (place / ".complete").exists():
        return place
    shutil.rmtree(place.parent, ignore_errors=True)
    shutil.copytree(FIXTURE, place)
    sys.path.insert(0, str(ROOT))
    from tests.tui import scenarios

    t = time.perf_counter()
    scenarios.add_series(place, n - 11)
    (place / ".complete").write_text("")
    print(f"(made a campaign of {n} runs in {time.perf_counter() - t:.0f} s: {place})")
    return place


def many_decisions(n: int) -> Path:
    place = Path(tempfile.mkdtemp(prefix="cockpit-bench-decisions-")) / "demo"
    shutil.copytree(FIXTURE, place)
    block = "".join(
        f'\n[[decisions]]\ndate = "2026-01-02"\ntext = "observation {i} about the runs"\nkind = "observation"\n'
        f'runs = ["r0001"]\n'
        for i in range(n)
    )
    with open(place / "campaign.toml", "a", encoding="utf-8") as fh:
        fh.write(block)
    return place


def child(campaign: Path, mode: str, marker: str, extra: str, code: str | None) -> dict:
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = str(Path(code).resolve())
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(campaign), mode, marker, extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
        cwd=code or ROOT,
    )
    wall = time.perf_counter() - t
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        print(out.stdout[-2000:], out.stderr[-3000:])
        raise SystemExit(1)
    res = json.loads(line[len("RESULT ") :])
    res["wall_s"] = wall
    return res


def verdict(value: float, target: float) -> str:
    return f"(target < {target:g} s: {'met' if value < target else 'NOT met'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=200_000)
    parser.add_argument("--code", help="a checkout of Cockpit to measure instead of this one")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"TUI at scale ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})"
        f"{' code: ' + args.code if args.code else ''}"
    )
    if args.runs:
        campaign = many_runs(args.runs)
        results = [child(campaign, "runs", "r0001", str(args.runs), args.code) for _ in range(args.repeat)]
        best = {k: sorted(r[k] for r in results)[len(results) // 2] for k in results[0]}
        print(f"{args.runs} runs (median of {args.repeat}), seconds from process start:")
        print(
            f"  first paint (runs table filled): {best['paint_s']:.3f} s "
            f"(of which importing the app {best['import_s']:.3f} s) {verdict(best['paint_s'], PAINT_TARGET_S)}"
        )
        print(f"  every run's status read from its folder: {best['states_s']:.2f} s")
        print(
            f"  compare (C to the quality table): {best['compare_s']:.3f} s {verdict(best['compare_s'], COMPARE_TARGET_S)}"
            f"; again: {best['compare_again_s']:.3f} s; curves (l, chosen runs drawn): {best['curves_s']:.3f} s"
        )
    if args.decisions:
        campaign = many_decisions(args.decisions)
        size = (campaign / "campaign.toml").stat().st_size
        from cockpit import notebook as nbm

        question = nbm.parse((FIXTURE / "campaign.toml").read_text()).campaign.question[:30]
        r = child(campaign, "decisions", question, "", args.code)
        print(f"{args.decisions:,} decisions ({size / 2**20:.0f} MiB campaign.toml):")
        print(
            f"  first paint (the question on screen): {r['paint_s']:.2f} s; the whole file read: {r['whole_s']:.1f} s"
        )
        shutil.rmtree(campaign.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
