"""The TUI never crashes on text or data: markup in notifications and files, clocks that step back,
notebooks that cannot be read, and random text in every place that shows notebook or event text."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit import events as ev
from cockpit import notebook as nbm
from cockpit.tui.plain import clean_line
from cockpit.tui.screens.campaign import CampaignScreen
from cockpit.tui.screens.compare import CompareScreen
from cockpit.tui.screens.data import DataScreen
from cockpit.tui.screens.run import RunScreen
from cockpit.tui.screens.seriesdialog import StartSeriesScreen
from cockpit.tui.screens.train import TrainRunScreen
from cockpit.tui.widgets.plot import Line, render_plot
from tests.tui.support import screen_text
from tests.tui.test_screens import notes, shows, until

pytestmark = pytest.mark.slow  # renders whole apps: not in the fast loop

SIZE = (80, 24)


def test_plot_survives_a_clock_that_steps_back():
    """Sample times that go backwards (the wall clock stepped back 3 s) are sorted, never an IndexError."""
    t = [100.0, 101.0, 102.0, 99.0, 100.5, 103.0]
    y = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    backwards = render_plot([Line("rss", "green", t, y)], [], 40, 8)
    pairs = sorted(zip(t, y, strict=True))
    ordered = render_plot([Line("rss", "green", [a for a, _ in pairs], [b for _, b in pairs])], [], 40, 8)
    assert backwards.plain == ordered.plain
    # non-finite values and a band are drawn without error too; a log scale leaves out what it cannot show
    render_plot(
        [Line("x", "red", [0, 1, 2], [1.0, float("nan"), float("inf")], lo=[0.5, 0, 0], hi=[2, 2, 2])], [], 30, 6
    )
    render_plot([Line("x", "red", [0, 1, 2], [0.0, -1.0, 5.0])], [], 30, 6, log_y=True)


async def test_notification_text_is_never_markup(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.notify("a broken [/x] tag and [bold]markup[/bold] [@click=app.quit]here", title="[/title]")
        await until(pilot, shows(app, "[/x] tag"), what="the toast, literally")
        assert app.is_running


async def test_broken_campaign_toml_is_reported_and_the_app_stays_up(make_app, recorded: Path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))
        (recorded / "campaign.toml").write_text('[campaign]\nname = "[/x] unterminated\n')
        await until(pilot, lambda: "cannot be read" in notes(app), what="the error toast")
        await until(pilot, shows(app, "campaign.toml cannot be read"), what="the error in the summary")
        await pilot.press("down", "enter")  # the runs are still read from their folders, and open
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.press("escape", "p")  # an action that needs the notebook says why not
        await until(pilot, lambda: "Fix the file" in notes(app))


@pytest.mark.parametrize("bad", ["binary", "nested", "folder"])
async def test_an_unreadable_notebook_never_takes_the_app_down(make_app, recorded: Path, bad: str):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))
        path = recorded / "campaign.toml"
        if bad == "binary":
            path.write_bytes(b"\xff\xfe\x00binary\x80\x81" * 100)
            expected = "not valid UTF-8"
        elif bad == "nested":
            path.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
            expected = "campaign.toml"
        else:
            path.unlink()
            path.mkdir()
            expected = "is a folder"
        await until(pilot, shows(app, expected), what=f"the message for a {bad} notebook")
        assert app.is_running and isinstance(app.screen, CampaignScreen)
        await pilot.press("down", "up")
    # and opening Cockpit on such a notebook: the app starts, says why, and shows the runs it can read
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "cannot be read"), what="the message at start")
        await until(pilot, shows(app, "r0010  lr2e-4"), what="runs from their folders, as their run.toml says")


def test_the_tui_exits_non_zero_after_an_unhandled_exception(recorded: Path):
    script = (
        "import sys\n"
        "from cockpit.tui import app as a\n"
        "from cockpit.tui.screens import campaign as c\n"
        "def boom(self): raise RuntimeError('a bug')\n"
        "c.CampaignScreen.on_mount = boom\n"
        "sys.exit(a.main(sys.argv[1], headless=True))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(recorded)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0, out.stdout[-500:]
    assert "a bug" in out.stdout + out.stderr


# ---- random text everywhere

NASTY = [
    "[/x]",
    "[/]",
    "[bold]",
    "[@click=app.quit]q[/]",
    "[red",
    "\\[escaped]",
    "\x1b[31mred\x1b[0m",
    "\x00",
    "\x07",
    "\r",
    "\t",
    "\n",
    "\u202eevil",
    "\u200b",
    "e\u0301",
    "\U0001f469\u200d\U0001f680",
    "\u4e2d\u6587\u5b57",
    "%s %d {0}",
    "${HOME}",
    "x" * 3000,
    "]",
    "[",
]


def nasty(rng: random.Random, surrogates: bool = False) -> str:
    parts = [rng.choice(NASTY) for _ in range(rng.randint(1, 4))]
    if surrogates and rng.random() < 0.3:
        parts.append("\ud800")
    return "ok " + "".join(parts)


def poison(campaign: Path, rng: random.Random) -> None:
    """Hostile text in every notebook and event field the TUI shows."""
    nb = nbm.load(campaign)
    c = nb.campaign
    c.question, c.notes, c.quality_metric = nasty(rng), nasty(rng), nasty(rng)
    for v in nb.variants:
        v.differs, v.why = nasty(rng), nasty(rng)
    for r in nb.runs:
        r.verdict, r.notes = nasty(rng), nasty(rng)
    nb.decisions.append(nbm.Decision(date=nasty(rng), text=nasty(rng), kind="observation", runs=["r0001"]))
    nb.selection.gpu, nb.selection.notes, nb.selection.precision = nasty(rng), nasty(rng), nasty(rng)
    nb.conclusion = nbm.Conclusion(text=nasty(rng), chosen_variant="lr1e-4", date=nasty(rng))
    nbm.save(nb)
    for rdir in sorted((campaign / "runs").iterdir()):
        path = rdir / ev.EVENTS_FILE
        lines = []
        for raw in path.read_text().splitlines():
            try:
                e = json.loads(raw)
            except ValueError:
                lines.append(raw)
                continue
            kind = e.get("kind")
            if kind == ev.LOG:
                e["message"] = nasty(rng, True)
            elif kind == ev.GATE:
                e["remedy"], e["message"] = nasty(rng, True), nasty(rng, True)
                for check in e.get("checks") or []:
                    check["name"], check["detail"] = nasty(rng, True), nasty(rng, True)
                e["inputs"] = {nasty(rng): nasty(rng, True)}
            elif kind == ev.RUN_END:
                e["stop_reason"] = nasty(rng, True)
            elif kind == ev.EVAL:
                e["metrics"] = {nasty(rng): 0.5, "token_accuracy": nasty(rng)}
            elif kind == ev.STEP and rng.random() < 0.01:
                e["loss"] = nasty(rng)
            elif kind == ev.SAMPLE and rng.random() < 0.05:
                e["t"] = e["t"] - rng.uniform(0, 5)  # a clock stepping back
            lines.append(json.dumps(e))
        lines.append(json.dumps({"kind": ev.LOG, "t": "not a time", "level": nasty(rng), "message": ["a", "list"]}))
        lines.append("{not json " + nasty(rng))
        lines.append(json.dumps({"kind": ev.GATE, "phase": nasty(rng), "verdict": nasty(rng), "checks": "nope"}))
        path.write_text("\n".join(lines) + "\n")
        inspect = rdir / "inspect.json"
        if inspect.exists():
            doc = json.loads(inspect.read_text())
            for ex in doc["examples"]:
                ex["id"], ex["target"] = nasty(rng, True), nasty(rng, True)
                ex["text"] = [[nasty(rng, True), True], [nasty(rng), False], nasty(rng)]
                ex["row"][nasty(rng)] = [nasty(rng), 1, None]
            inspect.write_text(json.dumps(doc))
        metrics = rdir / "metrics.json"
        if metrics.exists():
            m = json.loads(metrics.read_text())
            m["final_metrics"] = {nasty(rng): 1.0, "x": nasty(rng)}
            m["final_step"] = nasty(rng)
            metrics.write_text(json.dumps(m))


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_text_in_every_field_never_crashes_a_screen(make_app, recorded: Path, seed: int):
    poison(recorded, random.Random(seed))
    question = clean_line(nbm.load(recorded).campaign.question)[:16]
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, question), what="the poisoned question, shown literally")
        visits = [
            ("home enter", RunScreen),
            ("home down enter", RunScreen),  # the crashed pilot
            ("home down down enter", TrainRunScreen),
            ("home down down down down down down down down enter", TrainRunScreen),  # the diverged run
            ("home i", DataScreen),
            ("home down down i", DataScreen),  # a series run: its variant's pilot
        ]
        for keys, kind in visits:
            await pilot.press(*keys.split())
            await until(pilot, lambda kind=kind: isinstance(app.screen, kind), what=kind.__name__)
            await pilot.pause(0.2)
            if kind is RunScreen:
                await pilot.press("down", "enter")  # a gate's detail
                await pilot.pause(0.1)
                await pilot.press("escape")
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, CampaignScreen))
        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        await app.workers.wait_for_complete()
        await pilot.press("l", "a", "s", "y")
        await pilot.pause(0.3)
        await pilot.press("escape", "S")
        await until(pilot, lambda: isinstance(app.screen, StartSeriesScreen))
        await pilot.press("escape", "v")
        await pilot.pause(0.1)
        await pilot.press("escape", "question_mark")
        await pilot.pause(0.1)
        await pilot.press("escape", "ctrl+p")
        await pilot.pause(0.3)
        await pilot.press("escape")
        await pilot.pause(0.1)
        for t in ("r", "slash", "o", "k", "enter", "t", "t", "f", "n", "end", "home"):
            await pilot.press(t)
        await pilot.pause(0.3)
        assert app.is_running
        text = screen_text(app)
        assert "\x1b" not in text and "\x00" not in text  # control characters are shown as symbols
