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
  the notebook) or, for the huge notebook, the question shown. Timed
  ``--paint-repeat`` times, interleaved with a bare Textual app (header, a
  40-row table, footer) and with the 11-run fixture, since a shared machine's
  speed changes from one process to the next: the median, and the median of
  each round's ratios;
- states: every run's status read from its folder;
- compare: from pressing C (once the states are read) until the quality table
  is on screen, and then l until the curves are drawn;
- for the huge notebook, when the whole file has been read in the background.

Targets (issue 15): first paint under 0.3 s and compare under 0.5 s with 1,000
runs. The 0.3 s was set where the 11-run fixture painted in 0.27 s; on a machine
where a bare Textual app alone needs about that, the side-by-side form of it is
printed too: 1,000 runs paint within 0.3 / 0.27 = 1.11x of the 11-run paint.
Cockpit's bytecode is compiled first, as ``setup.sh`` leaves it.
``--code DIR`` measures another checkout (before/after).

Run: ``.venv/bin/python bench/tui_scale.py [--runs 1000] [--decisions 200000] [--paint-repeat 9] [--repeat 3]
[--code DIR]``.
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
# The 0.3 s target was set where the recorded campaign painted in 0.27 s: a thousand runs may cost 0.3 / 0.27 of it.
SCALE_TARGET = 0.3 / 0.27
COMPARE_TARGET_S = 0.5

CHILD = r"""
import asyncio, json, sys, time
t0 = time.perf_counter()
from cockpit.tui.app import CockpitApp
from cockpit.tui.device import StaticDeviceSource
from textual.screen import Screen
t_import = time.perf_counter() - t0
campaign, mode, first_id = sys.argv[1], sys.argv[2], sys.argv[3]

# Each frame the screen composes is checked, while something is awaited, for what is awaited: the
# time is that of the first frame that shows it. (Reading the screen's text costs about 5 ms: done
# once a frame, not polled.)
armed = {"predicate": None, "at": None}
_refresh = Screen._compositor_refresh


def checked(self):
    _refresh(self)
    if armed["predicate"] is not None and armed["at"] is None:
        at = time.perf_counter()  # the frame is out: reading it back is the bench's cost, not the app's
        if armed["predicate"]():
            armed["at"] = at


Screen._compositor_refresh = checked


def text(app):
    return "\n".join(s.text for s in app.screen._compositor.render_strips())


async def until(pilot, predicate, limit=600.0, frame=False):
    # seconds from the process start to the first frame that showed it (frame=True) or to now
    start = time.perf_counter()
    if frame:
        armed["predicate"], armed["at"] = predicate, None
        if predicate():  # already on screen
            armed["at"] = time.perf_counter()
    while True:
        if frame and armed["at"] is not None:
            armed["predicate"] = None
            return armed["at"] - t0
        if not frame and predicate():
            return time.perf_counter() - t0
        if time.perf_counter() - start > limit:
            raise SystemExit("timed out")
        await asyncio.sleep(0.005)


def shows(app, marker):
    return lambda: marker in text(app)


async def after_key(pilot, key, predicate, limit=600.0):
    # seconds from sending the key to the first frame that showed it. Armed before the key: pilot.press
    # returns only once animations end (a tab's underline slides for a third of a second), well after
    # the frame that matters.
    armed["predicate"], armed["at"] = predicate, None
    t1 = time.perf_counter()
    await pilot.press(key)
    while armed["at"] is None:
        if time.perf_counter() - t1 > limit:
            raise SystemExit("timed out")
        await asyncio.sleep(0.005)
    armed["predicate"] = None
    return armed["at"] - t1


async def main():
    app = CockpitApp(campaign, device_source=StaticDeviceSource(), watch=False)
    res = {"import_s": t_import}
    async with app.run_test(size=(120, 40)) as pilot:
        if mode == "paint":
            res["paint_s"] = await until(pilot, shows(app, first_id), frame=True)
        elif mode == "runs":
            res["paint_s"] = await until(pilot, shows(app, first_id), frame=True)
            res["states_s"] = await until(pilot, lambda: len(app.screen.states) >= int(sys.argv[4]))
            await pilot.pause(0.5)
            res["compare_s"] = await after_key(pilot, "C", shows(app, "across seeds"))
            plot = app.screen.query_one("#curve-plot")
            res["curves_s"] = await after_key(
                pilot, "l", lambda: bool(plot.lines) and "reading" not in text(app) and "Loss curves" in text(app)
            )
            await pilot.press("escape")
            await pilot.pause(0.3)
            res["compare_again_s"] = await after_key(pilot, "C", shows(app, "across seeds"))
        else:
            question = first_id
            res["paint_s"] = await until(pilot, shows(app, question), frame=True)
            res["whole_s"] = await until(
                pilot, lambda: not getattr(app, "notebook_partial", False) and len(app.notebook.decisions) > 1000
            )
    print("RESULT " + json.dumps(res))


asyncio.run(main())
"""

# The floor on this machine: a bare Textual app (header, a 40-row table of 9 columns, footer) timed
# the same way, so the first paint can be read against what Textual itself needs here.
FLOOR = r"""
import asyncio, json, time
t0 = time.perf_counter()
from textual.app import App
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header
t_import = time.perf_counter() - t0
at = []
_refresh = Screen._compositor_refresh


def checked(self):
    _refresh(self)
    now = time.perf_counter()
    if not at and "r0001" in "\\n".join(s.text for s in self._compositor.render_strips()):
        at.append(now)


Screen._compositor_refresh = checked


class Bare(App):
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self):
        yield Header()
        yield DataTable()
        yield Footer()

    def on_mount(self):
        table = self.query_one(DataTable)
        table.add_columns(*"run variant seed status phase peak time verdict reason".split())
        for i in range(40):
            table.add_row(f"r{i:04d}", "lr1e-4", str(i), "completed", "done", "123", "1.0s", "pass", "budget")


async def main():
    app = Bare()
    async with app.run_test(size=(120, 40)):
        while not at:
            await asyncio.sleep(0.005)
    print("RESULT " + json.dumps({"import_s": t_import, "paint_s": at[0] - t0}))


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


def child(campaign: Path | None, mode: str, marker: str, extra: str, code: str | None) -> dict:
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = str(Path(code).resolve())
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", FLOOR]
        if mode == "floor"
        else [sys.executable, "-c", CHILD, str(campaign), mode, marker, extra],
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
    parser.add_argument("--repeat", type=int, default=3, help="runs of the whole sequence (states, compare)")
    parser.add_argument("--paint-repeat", type=int, default=9, help="first paints of each app, interleaved")
    args = parser.parse_args()
    print(
        f"TUI at scale ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})"
        f"{' code: ' + args.code if args.code else ''}"
    )
    # Cockpit's modules from bytecode, as ./setup.sh leaves them (and Textual's, compiled by pip): where
    # PYTHONDONTWRITEBYTECODE is set, each start would otherwise compile them again (about 0.13 s here).
    code_dir = Path(args.code).resolve() if args.code else ROOT
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(code_dir / "cockpit")], check=False)
    if args.runs:
        campaign = many_runs(args.runs)
        small = Path(tempfile.mkdtemp(prefix="cockpit-bench-small-")) / "demo"
        shutil.copytree(FIXTURE, small)
        n_small = len([p for p in (small / "runs").iterdir() if (p / "run.toml").is_file()])

        def median(rs: list[dict]) -> dict:
            return {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]}

        # First paints alone, many times: each is a second's work, and a shared machine's speed changes from
        # one process to the next. Interleaved, so a slow moment hits all three alike.
        paints: dict[str, list[dict]] = {"floor": [], "small": [], "big": []}
        for _ in range(args.paint_repeat):
            paints["floor"].append(child(None, "floor", "", "", args.code))
            paints["small"].append(child(small, "paint", "r0001", "", args.code))
            paints["big"].append(child(campaign, "paint", "r0001", "", args.code))
        results, smalls = [], []
        for _ in range(args.repeat):
            smalls.append(child(small, "runs", "r0001", str(n_small), args.code))
            results.append(child(campaign, "runs", "r0001", str(args.runs), args.code))
        shutil.rmtree(small.parent, ignore_errors=True)

        best, few = median(results), median(smalls)
        floor, paint_few, paint = median(paints["floor"]), median(paints["small"]), median(paints["big"])
        ratio_few = sorted(b["paint_s"] / s["paint_s"] for b, s in zip(paints["big"], paints["small"], strict=True))
        ratio_floor = sorted(b["paint_s"] / f["paint_s"] for b, f in zip(paints["big"], paints["floor"], strict=True))
        mid = len(ratio_few) // 2
        print(f"{args.runs} runs, seconds from process start to the frame that shows it:")
        print(
            f"  first paint (runs table filled), median of {args.paint_repeat}: {paint['paint_s']:.3f} s "
            f"(of which importing the app {paint['import_s']:.3f} s) {verdict(paint['paint_s'], PAINT_TARGET_S)}"
        )
        print(
            f"  side by side, same rounds: a bare Textual app with a 40-row table {floor['paint_s']:.3f} s "
            f"(import {floor['import_s']:.3f} s); Cockpit with the fixture's {n_small} runs {paint_few['paint_s']:.3f} s"
        )
        print(
            f"  {args.runs} runs paint in {ratio_few[mid]:.2f}x the {n_small}-run paint (median of the rounds' ratios; "
            f"target <= {SCALE_TARGET:.2f}x: {'met' if ratio_few[mid] <= SCALE_TARGET else 'NOT met'}), "
            f"{ratio_floor[mid]:.2f}x the bare app's"
        )
        print(f"(the next lines: median of {args.repeat})")
        print(f"  every run's status read from its folder: {best['states_s']:.2f} s")
        print(
            f"  compare (C to the quality table): {best['compare_s']:.3f} s {verdict(best['compare_s'], COMPARE_TARGET_S)}"
            f"; again: {best['compare_again_s']:.3f} s; curves (l, chosen runs drawn): {best['curves_s']:.3f} s"
        )
        print(
            f"  side by side, {n_small} runs: compare {few['compare_s']:.3f} s, again {few['compare_again_s']:.3f} s; "
            f"{args.runs} runs take {best['compare_s'] / few['compare_s']:.2f}x"
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
