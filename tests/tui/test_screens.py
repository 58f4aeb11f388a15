"""Drive the real app with key presses at 80x24 against the recorded campaign."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from cockpit import events as ev
from cockpit import notebook as nbm
from cockpit.tui.screens.campaign import CampaignScreen
from cockpit.tui.screens.data import DataScreen, text_of
from cockpit.tui.screens.device import DeviceScreen
from cockpit.tui.screens.help import HelpScreen
from cockpit.tui.screens.run import RunScreen
from cockpit.tui.widgets.gates import GateTable
from cockpit.tui.widgets.tail import TailLog
from tests.tui.support import screen_text

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

SIZE = (80, 24)
NEW = "r0012"  # the next run id after the recorded r0001-r0011


async def until(pilot, predicate, timeout: float = 30.0, what: str = "") -> None:
    """Let the app run until ``predicate()`` holds; fail with the screen if it never does.

    It returns as soon as the predicate holds, so the deadline costs nothing when things work. It is long because
    a loaded 2-CPU box (two suites side by side, load 9) took more than 5 s to paint a pushed run screen: the
    screen was right when the old 5 s deadline had already failed the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}:\n{screen_text(pilot.app)}")


def notes(app) -> str:
    """Every notification still held by the app (toasts are drawn on a separate layer)."""
    return "\n".join(f"{n.title} {n.message}" for n in app._notifications)


def said(app) -> str:
    """Every notification the app asked for since it started, its toast shown, held or expired: what a test waits for
    when the toast may come and go while a loaded box stalls the test for longer than a toast lives."""
    return "\n".join([*getattr(app, "asked", []), notes(app)])


def shows(app, text: str):
    """The text is on the screen or in a notification."""
    return lambda: text in screen_text(app) or text in notes(app)


def flat(app) -> str:
    """The screen's words in one line: a message that wraps inside a dialog's border is still found."""
    return " ".join(re.sub("[\u2588\u2502\u258a\u258e]", " ", screen_text(app)).split())


async def test_campaign_screen_shows_the_notebook_and_run_states(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "crashed"), what="r0002 derived from its folder as crashed")
        expected = (
            "Which learning rate",
            "Held constant updates (200 updates)",
            "Examples per update 16 = microbatch 2 x accumulation 8",
            "r0001",
            "passed",
            "1,180",
            "backward",  # the phase r0002 reached
            "Pilot",
            "Series",
            "Compare",
            "Decision",
        )  # footer keys
        # Every row is redrawn by the same message; wait for the frame that shows them all.
        await until(pilot, lambda: all(e in screen_text(app) for e in expected), what=f"all of {expected}")


async def test_run_screen_replays_every_gate_from_files(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        await until(pilot, shows(app, "14/14 gates"))
        text = screen_text(app)
        assert "passed" in text and "every gate passed (1 warning)" in text
        table = app.screen.query_one(GateTable)
        assert [str(k.value) for k in table.rows] == list(ev.PHASES)  # every phase has its row (the table scrolls)
        assert "warn" in text  # the data gate's warning, in words
        assert "vs 22G" in text and "\u25c0" in text  # bars against capacity, the peak marked
        assert "GPU memory" in text and "gpu0 NVML" in text
        assert "loss" in text
        assert "gate export: pass" in text  # log tail
        # Enter on a gate shows its checks, memory and remedy.
        for _ in range(1):
            await pilot.press("down")
        await pilot.press("enter")
        await until(pilot, shows(app, "remedy"))
        text = screen_text(app)
        assert "Gate data" in text and "3 of 3200 examples cropped" in text
        await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen))


async def test_a_gate_timed_on_a_busy_machine_carries_a_star_and_says_how_busy(make_app, recorded: Path):
    events = recorded / "runs" / "r0001" / ev.EVENTS_FILE
    lines = []
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e.get("kind") == ev.GATE and e.get("phase") == "data":
            e["busy"] = "other processes kept 1.8 of 2 CPUs busy"
        lines.append(json.dumps(e))
    events.write_text("\n".join(lines) + "\n")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        await until(pilot, shows(app, "14/14 gates"))
        table = app.screen.query_one(GateTable)
        cells = [str(c) for c in table.get_row("data")]
        assert any(c.endswith("*") for c in cells), cells
        assert not any(str(c).endswith("*") for c in table.get_row("stack"))
        await pilot.press("down", "enter")
        await until(pilot, shows(app, "timed on a busy machine: other processes kept 1.8 of 2 CPUs"))


async def test_crashed_run_says_so_with_rss_when_no_gpu(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "enter")
        await until(pilot, shows(app, "crashed"))
        text = screen_text(app)
        assert "r0002" in text
        assert "process ended without a final event during phase backward" in text  # the CLI's words
        assert "backward       crashed" in text  # the phase it crashed in, said in its row
        assert "no GPU, process RSS" in text
        assert "running" not in text.split("phase")[0]
        assert "Killed" in text  # the output.log tail after a crash, its last line on screen
        log = "\n".join(app.screen.query_one(TailLog).lines)
        assert "out of host memory" in log


async def test_data_view_shows_supervised_spans_and_rows(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("i")
        await until(pilot, lambda: isinstance(app.screen, DataScreen))
        await until(pilot, shows(app, "inspected examples"))
        text = screen_text(app)
        assert "train ex0000" in text
        assert "Q: reverse abc A: cba" in text
        assert "input_ids" in text and "attention_mask" in text and "labels" in text
        await pilot.press("down")
        await until(pilot, shows(app, "Q: sort dcab A: abcd"))
        # the supervised span carries its own style
        rendered = text_of(app.screen.examples[1])
        spans = [rendered.plain[s.start : s.end] for s in rendered.spans if "green" in str(s.style)]
        assert " abcd" in spans
        await pilot.press("escape", "down", "i")
        await until(pilot, shows(app, "no inspected examples"))


async def test_device_panel_no_gpu_and_fake_gpu(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await until(pilot, shows(app, "no NVIDIA GPU"))
        assert "NVML Shared Library Not Found" in screen_text(app)
    app = make_app(gpu=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, DeviceScreen))
        await until(pilot, shows(app, "NVIDIA L4"))
        text = screen_text(app)
        assert "1,802 MiB / 23,034 MiB" in text
        assert "87%" in text and "61 W / 72 W" in text and "58 C" in text
        assert "pid 4242" in text and "Cockpit run r0002" in text
        assert "jupyter-kernel" in text and "other processes hold 512 MiB here" in text
        assert "disk for runs/ 48.0 GiB free of 200.0 GiB" in text
        assert "load 1.9 busy" in text


def test_machine_facts_read_the_disk_and_this_campaigns_running_pids(recorded: Path, monkeypatch):
    from cockpit import runs
    from cockpit.tui.device import machine_facts
    from cockpit.tui.screens.device import machine_text

    monkeypatch.setenv("COCKPIT_FAKE_FREE_MIB", "3072")
    runs.write_process(recorded / "runs" / "r0002", os.getpid(), ["python", "-m", "cockpit.pilot"])
    facts = machine_facts(recorded, ["r0002", "../etc"])  # a bad id read from a file is passed over
    assert facts.disk_free == 3072 * 2**20 and facts.disk_total and facts.disk_total > 0
    assert facts.cockpit_pids == {os.getpid(): "r0002"} and facts.cpus >= 1
    assert "disk for runs/ 3,072 MiB free" in machine_text(facts).plain


async def test_help_and_command_palette(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert "start a pilot" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen))
        await pilot.press("ctrl+p")
        await pilot.press(*"GPUs")
        await until(pilot, shows(app, "Show GPUs"))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DeviceScreen))


async def test_start_pilot_watch_it_live_and_stop_it(make_app, recorded: Path, launcher):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await until(pilot, shows(app, "Start a pilot"))
        await pilot.press("down", "enter")  # lr5e-5, then the seed field
        await pilot.press("backspace", "7", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen after start")
        assert launcher.started and launcher.started[0].name == NEW
        row = nbm.load(recorded).run(NEW)
        assert (row.variant, row.seed, row.kind) == ("lr5e-5", 7, "pilot")
        await until(pilot, shows(app, "running"))
        # The pilot writes: gates appear live, row by row.
        writer = ev.EventWriter(launcher.started[0] / ev.EVENTS_FILE)
        writer.emit(ev.RUN_START, run_id=NEW, variant="lr5e-5", seed=7, phases=list(ev.PHASES))
        writer.emit(ev.PHASE_START, phase="stack", inputs={})
        writer.emit(
            ev.GATE,
            phase="stack",
            verdict="pass",
            checks=[],
            duration_s=0.4,
            mem={"torch": None, "nvml": None, "rss": 2**30, "rss_peak": 2**30},
        )
        writer.emit(ev.PHASE_START, phase="data", inputs={})
        writer.emit(ev.LOG, level="info", message="checking 3200 examples")
        await until(pilot, shows(app, "1/14 gates"))
        assert "checking 3200 examples" in screen_text(app)
        writer.emit(
            ev.GATE,
            phase="data",
            verdict="fail",
            checks=[{"name": "masks", "ok": False, "detail": "all zero"}],
            remedy="fix the dataset or transform",
            duration_s=0.2,
            mem={"torch": None, "nvml": None, "rss": 2**30, "rss_peak": 2**30},
        )
        writer.close()
        await until(pilot, shows(app, "fail"))
        # Stop asks first; n keeps it running, y stops it.
        await pilot.press("x")
        await until(pilot, shows(app, f"Stop pilot {NEW}?"))
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        assert launcher.procs[0].poll() is None
        await pilot.press("x")
        await until(pilot, shows(app, f"Stop pilot {NEW}?"))
        await pilot.press("y")
        await until(pilot, shows(app, "stopped (SIGTERM)"), what="stop notification")
        await until(pilot, shows(app, "crashed"), what="no final event after the stop")


async def test_quit_and_reopen_reattaches_to_a_running_pilot(make_app, launcher):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p", "enter", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        rdir = launcher.started[0]
        await pilot.press("q")
    writer = ev.EventWriter(rdir / ev.EVENTS_FILE)
    writer.emit(ev.RUN_START, run_id=rdir.name, variant="lr1e-4", seed=0, phases=list(ev.PHASES))
    writer.emit(ev.PHASE_START, phase="stack", inputs={})
    writer.emit(ev.GATE, phase="stack", verdict="pass", checks=[], duration_s=0.4, mem={"rss": 2**30})
    writer.close()
    assert launcher.procs[0].poll() is None  # quitting left it alive
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "running"), what=f"{NEW} running in the campaign table")
        await pilot.press(*["down"] * 11, "enter")
        await until(pilot, shows(app, "1/14 gates"))
        assert NEW in screen_text(app) and "running" in screen_text(app)


async def test_add_decision_and_observation_saved_at_once(make_app, recorded: Path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        await until(pilot, shows(app, "New decision"))
        await pilot.press(*"Run the series on lr1e-4", "enter")
        await until(pilot, shows(app, "decision saved"))
        nb = nbm.load(recorded)
        assert nb.decisions[-1].text == "Run the series on lr1e-4"
        assert nb.decisions[-1].runs == ["r0001"] and nb.decisions[-1].kind == "decision"
        assert "Run the series on lr1e-4" in (recorded / "campaign.toml").read_text()
        await pilot.press("down", "o")
        await until(pilot, shows(app, "New observation"))
        await pilot.press(*"CPU box runs out of host memory", "enter")
        await until(pilot, shows(app, "observation saved"))
        assert nbm.load(recorded).decisions[-1].runs == ["r0002"]


async def test_verdict_conclusion_and_selection(make_app, recorded: Path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("v")
        await until(pilot, shows(app, "Verdict on r0001"))
        await pilot.press(*"keep", "enter")
        await until(pilot, shows(app, "verdict of r0001 saved"))
        assert nbm.load(recorded).run("r0001").verdict == "keep"
        await pilot.press("c")
        await until(pilot, shows(app, "ctrl+s saves"))
        await pilot.press(*"lr1e-4 is good enough", "tab", *"lr1e-4", "ctrl+s")
        await until(pilot, shows(app, "conclusion saved"))
        c = nbm.load(recorded).conclusion
        assert (c.text, c.chosen_variant) == ("lr1e-4 is good enough", "lr1e-4")
        await pilot.press("s")
        await until(pilot, shows(app, "Selection sheet"))
        await pilot.press(*"1800", "tab", "tab", *"bf16", "ctrl+s")
        await until(pilot, shows(app, "selection sheet saved"))
        s = nbm.load(recorded).selection
        assert s.memory_per_gpu_mib == 1800.0 and s.precision == "bf16"


async def test_change_on_disk_meanwhile_is_shown_never_overwritten(make_app, recorded: Path):
    app = make_app(watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("v")
        await until(pilot, shows(app, "Verdict on r0001"))
        # Meanwhile the CLI writes another verdict.
        nbm.mutate(recorded, lambda nb: setattr(nb.run("r0001"), "verdict", "rerun"))
        await pilot.press(*"keep", "enter")
        await until(pilot, lambda: "changed on disk" in flat(app), what="conflict message")  # however it wraps
        assert "'rerun'" in screen_text(app) and "keep" in screen_text(app)  # both values, in the open dialog
        assert nbm.load(recorded).run("r0001").verdict == "rerun"
        # The dialog kept what was typed; Enter now saves it over the other change, knowingly.
        await pilot.press("enter")
        await until(pilot, shows(app, "verdict of r0001 saved"), what="saved on the second Enter")
        assert nbm.load(recorded).run("r0001").verdict == "keep"


async def test_external_change_is_detected_and_reloaded(make_app, recorded: Path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, shows(app, "r0001"))
        nbm.mutate(
            recorded,
            lambda nb: nb.decisions.append(
                nbm.Decision(date="2026-01-02", text="written by the CLI", kind="observation", runs=[])
            ),
        )
        await until(pilot, lambda: "changed on disk" in notes(app), what="the change noticed")
        # With eleven runs the notes sit below the table at 80x24: Tab to them, scroll down.
        await pilot.press("tab")
        for _ in range(20):
            if shows(app, "written by the CLI")():
                break
            await pilot.press("down")
            await pilot.pause(0.02)
        await until(pilot, shows(app, "written by the CLI"), what="reloaded decision")


async def test_inspect_json_written_later_is_read(make_app, recorded: Path):
    (recorded / "runs" / "r0001" / "inspect.json").write_text(json.dumps({"examples": []}))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("i")
        await until(pilot, shows(app, "0 inspected examples"))


async def test_a_notebook_read_landing_while_no_screen_is_up_is_ignored(make_app):
    """A notebook read that lands while the app starts or closes found no screen: refreshing the keys on offer
    raised ScreenStackError and failed a loaded CI run (test_probe_live)."""
    from cockpit.tui.messages import NotebookChanged

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        stacks = app._screen_stacks
        saved = stacks[app._current_mode]
        stacks[app._current_mode] = []
        try:
            app._broadcast(lambda: NotebookChanged(False))
        finally:
            stacks[app._current_mode] = saved
