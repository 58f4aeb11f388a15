"""Series and compare in the TUI, by key presses against the recorded series (r0003-r0010).

The recorded series: lr1e-4 and lr5e-5 over seeds 0-2, lr2e-4 seed 0, and
lr2e-4 seed 1 (r0009) diverged near update 80; len24 is a memory variant with
a passed pilot (r0011) whose max_length 24 cuts targets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cockpit import compare
from cockpit import events as ev
from cockpit import notebook as nbm
from cockpit.tui import comparison as cmp
from cockpit.tui.app import Intervals
from cockpit.tui.screens.campaign import CampaignScreen
from cockpit.tui.screens.compare import CompareScreen
from cockpit.tui.screens.dialogs import ConfirmScreen
from cockpit.tui.screens.seriesdialog import StartSeriesScreen
from cockpit.tui.screens.train import TrainRunScreen
from cockpit.tui.widgets.plot import BraillePlot
from tests.tui.support import screen_text
from tests.tui.test_screens import NEW, notes, said, shows, until

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

SIZE = (80, 24)
WIDE = (120, 40)
FAST = Intervals(events_s=0.05, runs_s=0.3, notebook_s=0.2, device_s=0.5, series_s=0.1)


def test_read_only_collect_matches_cockpit_compare(recorded: Path):
    """The TUI's tables come from the same figures as `cockpit compare` (both read only)."""
    before = (recorded / "campaign.toml").read_bytes()
    nb = nbm.load(recorded)
    ours = cmp.collect(nb)
    assert (recorded / "campaign.toml").read_bytes() == before  # reading never rewrites the notebook
    cli = compare.collect(recorded)
    for key in ("quality", "not_completed", "memory", "flags", "reference", "method"):
        assert ours[key] == cli[key], key
    by_variant = {g["variant"]: g for g in ours["quality"]}
    assert by_variant["lr1e-4"]["stats"]["n"] == 3 and by_variant["lr2e-4"]["stats"]["n"] == 1
    assert by_variant["lr2e-4"]["not_completed"] == {"diverged": 1}
    assert by_variant["lr2e-4"]["verdict"] == "not distinguishable"
    assert by_variant["lr5e-5"]["verdict"] == "worse"
    assert [f["flag"] for f in ours["flags"]["len24"]][0] == "shorter max_length truncates targets"


def test_curves_colours_and_markers_tell_every_run_apart(recorded: Path):
    nb = nbm.load(recorded)
    data = cmp.collect(nb)
    curves = cmp.curves(nb, data)
    assert [c.id for c in curves] == [f"r{i:04d}" for i in range(3, 11)]
    assert len({(c.style, c.marker) for c in curves}) == len(curves)
    assert len({c.style for c in curves}) == 3  # one colour per variant
    r3 = next(c for c in curves if c.id == "r0003")
    assert len(r3.steps) == 200 and [s for s, _ in r3.evals] == [50, 100, 150, 200]
    assert r3.evals[-1][1] == r3.value  # the last validation is the value compare counts
    r9 = next(c for c in curves if c.id == "r0009")
    assert r9.status == "diverged" and len(r9.evals) == 1 and r9.steps[-1] < 100
    assert "r0009" in cmp.default_selection(curves)  # a diverged run is shown, never hidden
    top = cmp.zoom_top(curves)
    assert top is not None and top < max(r9.loss) / 2


async def test_compare_tables_as_the_cli_prints_them(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        await until(pilot, shows(app, "val_loss across seeds"), what="the quality table")
        text = screen_text(app)
        for expected in (
            "lr1e-4",
            "lr5e-5",
            "lr2e-4",
            "reference",
            "worse",
            "not distinguishable",
            "s0=3.84",
            "1 diverged",
            "mean",
            "std",
            "min",
            "max",
        ):
            assert expected in text, expected
        # Page down to the runs that did not complete, memory per phase and the flags.
        for _ in range(6):
            await pilot.press("pagedown")
        await until(pilot, shows(app, "shorter max_length truncates targets"), what="the len24 flag")
        text = screen_text(app)
        assert "412 of 3200 examples (13%) lose target tokens" in text
        assert "not distinguishable" in text and "Quality:" in text  # the method text


async def test_compare_curves_chosen_by_keys(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        await until(pilot, lambda: screen.curves, what="curves read")
        await pilot.press("l")
        await until(pilot, shows(app, "r0009 lr2e-4 s1 diverged"), what="the run list")
        plot = screen.query_one("#curve-plot", BraillePlot)
        assert len(plot.lines) == 8
        assert plot.y_max is not None  # zoomed: the diverged run runs off the top
        text = screen_text(app)
        assert "update 200" in text and "diverged: loss" in text  # x axis, the diverged run's reason in the legend
        assert "\u25cf" in text and "\u25b2" in text and "\u25a0" in text  # markers
        await pilot.press("n")
        await until(pilot, lambda: not plot.lines)
        assert "no run chosen" in screen_text(app)
        await pilot.press("space", "down", "down", "down", "space")  # r0003 and r0006
        await until(pilot, lambda: [ln.label for ln in plot.lines] == ["r0003 lr1e-4 s0", "r0006 lr5e-5 s0"])
        styles = {ln.style for ln in plot.lines}
        assert len(styles) == 2
        assert "lr1e-4 \u25cfs0" in screen_text(app) and "lr5e-5 \u25cfs0" in screen_text(app)
        await pilot.press("z")
        await until(pilot, lambda: plot.y_max is None)
        await pilot.press("c")  # a colour per run: the two runs keep distinct colours
        await until(pilot, lambda: screen.per_run)
        assert len({ln.style for ln in plot.lines}) == 2 and "r0003 s0" in screen_text(app)
        await pilot.press("a")
        await until(pilot, lambda: len(plot.lines) == 8)
        assert len({ln.style for ln in plot.lines}) == 8
        await pilot.press("c", "n", "space")  # back to r0006 (under the cursor) alone
        await pilot.press("t")
        await until(pilot, lambda: screen.query_one("#compare-tabs").active == "tables")
        await pilot.press("l", "o")  # open the run under the cursor: r0006
        await until(pilot, lambda: isinstance(app.screen, TrainRunScreen))
        assert app.screen.run_id == "r0006"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen))
        # The palette reaches the curves directly.
        await pilot.press("ctrl+p", *"loss curves")
        await until(pilot, shows(app, "Compare loss curves"))
        await pilot.press("enter")
        await until(
            pilot,
            lambda: isinstance(app.screen, CompareScreen) and app.screen.query_one("#compare-tabs").active == "curves",
        )


async def test_series_run_shows_curve_validation_and_stop_reason(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "enter")  # r0003
        await until(pilot, lambda: isinstance(app.screen, TrainRunScreen))
        await until(pilot, shows(app, "update 200/200"))
        text = screen_text(app)
        assert "completed" in text and "budget reached: 200 updates" in text
        assert "validation (4) every 50" in text
        for cell in ("50", "4.3567", "200", "3.8403"):
            assert cell in text
        assert "final val 3.84 @200" in text  # metrics.json
        assert "0.480 s/update" in text
        assert "update 200: val_loss 3.84" in text  # the eval events in the log
        assert "gates" not in text.split("\n")[1]
        await pilot.press("escape", *["down"] * 6, "enter")  # r0009, the diverged one
        await until(pilot, lambda: isinstance(app.screen, TrainRunScreen) and app.screen.run_id == "r0009")
        await until(pilot, shows(app, "diverged"))
        text = screen_text(app)
        assert "update 81/200" in text
        assert "stop reason diverged: loss 18.89 at update 81 is above 4 x its starting value" in text
        assert "validation (1) every 50" in text and "4.1507" in text
        assert "final val 4.151 @50" in text
        plot = app.screen.query_one("#loss", BraillePlot)
        assert plot.lines[0].t[-1] == 81  # the curve up to the divergence, kept
        assert plot.lines[1].points == cmp.read_evals(app.screen.rdir / "evals.csv")  # its one validation point


def _finish(rdir: Path, launcher, status: str = "completed", reason: str = "budget reached: 4 updates") -> None:
    """What a series run writes, in brief; then its process ends."""
    w = ev.EventWriter(rdir / ev.EVENTS_FILE)
    w.emit(
        ev.RUN_START,
        run_id=rdir.name,
        variant="lr5e-5",
        seed=3,
        run_kind="train",
        phases=["train"],
        validation={"every_updates": 2},
    )
    w.emit(ev.PHASE_START, phase="train", inputs={"updates": 4})
    for k in range(1, 5):
        w.emit(ev.STEP, step=k, loss=4.5 - 0.1 * k, lr=5e-5, grad_norm=0.9, examples=16, duration_s=0.4, phase="train")
        if k % 2 == 0:
            w.emit(ev.EVAL, step=k, loss=4.4 - 0.1 * k, metrics={"token_accuracy": 0.03}, duration_s=0.2, examples=96)
    w.emit(ev.RUN_END, status=status, stop_reason=reason, phase="train", exit_code=0, updates=4)
    w.close()
    for proc in launcher.procs:
        if str(proc.pid) in (rdir / "process.json").read_text():
            proc.kill()
            proc.wait()


async def test_start_a_series_and_watch_its_runs_live(make_app, recorded: Path, launcher):
    app = make_app(timing=FAST)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("S")
        await until(pilot, shows(app, "Start a series"))
        await until(pilot, shows(app, "9 runs (3 variants x 3 seeds)"))
        await pilot.press("space", "down", "down", "space")  # lr1e-4 and lr2e-4 off: lr5e-5 only
        await pilot.press("tab", *["backspace"] * 5, *"3,4")
        await until(pilot, shows(app, "2 runs (1 variants x 2 seeds), 1 at a time"))
        await pilot.press("enter")
        # lr5e-5 was never piloted: the series' guard refuses in the dialog, which stays open
        await until(pilot, shows(app, "refused: lr5e-5 has no passed pilot"), what="the guard's refusal")
        assert isinstance(app.screen, StartSeriesScreen) and not launcher.started
        assert app.screen.query_one("#series-override").has_focus
        await pilot.press(*"the TUI test needs no pilot", "enter")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen))
        await until(pilot, lambda: len(launcher.started) == 1, what="the first run started")
        first = launcher.started[0]
        assert first.name == NEW
        nb = nbm.load(recorded)
        row = nb.run(NEW)
        assert (row.variant, row.seed, row.kind) == ("lr5e-5", 3, "train")
        assert "started without a passed pilot: the TUI test needs no pilot" in row.notes
        assert any(
            "training lr5e-5 without a passed pilot" in d.text and "the TUI test needs no pilot" in d.text
            for d in nb.decisions
        )
        await until(pilot, shows(app, "series 0/2 done, running r0012, 1 waiting"), what="series status")
        await until(pilot, lambda: "r0012" in screen_text(app) and "running" in screen_text(app))
        assert len(launcher.started) == 1  # one at a time: the second waits
        # Quitting now would drop the waiting run: Cockpit asks first.
        await pilot.press("q")
        await until(pilot, shows(app, "Quit with 1 series runs not started?"))
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen))
        # Compare lists the running run, chosen by default, while the series goes on.
        await pilot.press("C", "l")
        await until(pilot, shows(app, "r0012 lr5e-5 s3 running"), what="the running run in compare")
        assert "r0012" in app.screen.chosen
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen))
        # The first run ends: the series starts the next one by itself.
        _finish(first, launcher)
        await until(pilot, lambda: len(launcher.started) == 2, what="the second run started")
        await until(pilot, shows(app, "r0012 completed"), what="a notification for the finished run")
        second = launcher.started[1]
        assert nbm.load(recorded).run(second.name).seed == 4
        # Open the live second run: it is a train run, shown without gates.
        await pilot.press(*["down"] * 12, "enter")
        await until(pilot, lambda: isinstance(app.screen, TrainRunScreen) and app.screen.run_id == second.name)
        await until(pilot, shows(app, "running"))
        w = ev.EventWriter(second / ev.EVENTS_FILE)
        w.emit(ev.RUN_START, run_id=second.name, variant="lr5e-5", seed=4, run_kind="train", phases=["train"])
        w.emit(ev.PHASE_START, phase="train", inputs={"updates": 4})
        w.emit(ev.STEP, step=1, loss=4.49, lr=5e-5, grad_norm=0.9, examples=16, duration_s=0.4, phase="train")
        w.emit(ev.STEP, step=2, loss=None, lr=5e-5, grad_norm=None, examples=16, duration_s=0.4, phase="train")
        w.close()
        await until(pilot, shows(app, "update 2/4"), what="live steps")
        assert "loss non-finite" in screen_text(app)
        # It is killed without a final event: crashed, and the series is over.
        for proc in launcher.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        await until(pilot, lambda: "series finished" in said(app), what="the series' end")
        await until(pilot, shows(app, "crashed"))
        await pilot.press("escape")
        nb = nbm.load(recorded)
        assert nb.run(NEW).status == "completed"
        assert nb.run(second.name).status == "crashed"
        assert "1 completed" in app.series.status() and "1 crashed" in app.series.status()


async def test_series_dialog_refuses_bad_seeds_and_stops_a_series(make_app, launcher):
    app = make_app(timing=FAST)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("S")
        await until(pilot, shows(app, "Start a series"))
        await pilot.press("tab", *["backspace"] * 5, *"2-1")
        await until(pilot, shows(app, "seeds '2-1': write seeds as 0,1,2 or a range 0-4"))
        await pilot.press("enter")
        # refused in the dialog itself: the field is marked and keeps what was typed
        await until(pilot, lambda: app.screen.query_one("#series-seeds").has_class("-invalid"))
        assert app.screen.query_one("#series-seeds").value == "2-1"
        assert not launcher.started
        # seed 0, two at once, started despite the missing pilots
        await pilot.press(*["backspace"] * 3, "0", "tab", "backspace", "2", "tab", "tab", *"no pilot needed", "enter")
        await until(pilot, lambda: len(launcher.started) == 2, what="two runs at once")
        await pilot.press("ctrl+p", *"stop the series")
        await until(pilot, shows(app, "Stop the series"))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "1 runs not started are dropped" in screen_text(app)
        await pilot.press("y")
        await until(pilot, lambda: "series stopped" in said(app), what="stopped")
        await until(pilot, lambda: all(p.poll() is not None for p in launcher.procs), what="SIGTERM reached them")
        await until(pilot, lambda: "series finished" in said(app), what="the series' end")
        assert len(launcher.started) == 2


async def test_resume_a_stopped_run_from_the_palette(make_app, recorded: Path, launcher):
    """A stopped training run with a periodic checkpoint goes on as the same run, from the TUI."""
    rid = "r0010"
    rdir = recorded / "runs" / rid
    lines = (rdir / ev.EVENTS_FILE).read_text().splitlines()
    end = json.loads(lines[-1])
    assert end["kind"] == ev.RUN_END
    end.update(status="stopped", stop_reason="stopped (SIGTERM)", exit_code=7)
    (rdir / ev.EVENTS_FILE).write_text("\n".join([*lines[:-1], json.dumps(end)]) + "\n")
    (rdir / "checkpoints").mkdir(exist_ok=True)
    (rdir / "checkpoints" / "update-00000100.pt").write_bytes(b"not read by the launcher")
    nbm.mutate(nbm.find(recorded), lambda nb: setattr(nb.run(rid), "status", "stopped"))
    app = make_app(timing=FAST)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p", *"resume stopped")
        await until(pilot, shows(app, "Resume stopped runs"))
        await pilot.press("enter")
        await until(pilot, lambda: launcher.resumed == [rdir], what="the stopped run resumed")
        await until(pilot, lambda: "resume r0010" in notes(app) or "r0010 started" in notes(app), what="said")
        row = nbm.load(recorded).run(rid)
        assert row.id == rid and row.resumed.startswith("from update 100 at ")
        assert not [p for p in launcher.started if p.name != rid]  # no new run: the same one goes on
        await pilot.press("ctrl+p", *"resume stopped")
        await until(pilot, shows(app, "Resume stopped runs"))
        await pilot.press("enter")
        await until(pilot, lambda: "a series is running" in notes(app), what="one at a time")


async def test_the_series_refusal_names_the_pilot_key_that_works_and_boxes_say_chosen(make_app, recorded: Path):
    """Issue 36: the refusal said "P starts a pilot" while the key is p, and a chosen box differed from an unchosen
    one only in the colour of its X. The key is read from the campaign screen's binding; boxes say [x] or [ ]."""
    from cockpit.tui.screens.dialogs import StartPilotScreen
    from cockpit.tui.screens.seriesdialog import pilot_key

    key = next(b.key for b in CampaignScreen.BINDINGS if b.id == "pilot")
    assert pilot_key() == key == "p"
    app = make_app(timing=FAST)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("S")
        await until(pilot, shows(app, "9 runs (3 variants x 3 seeds)"))
        assert screen_text(app).count("[x] ") == 3 and "[ ] " in screen_text(app)  # len24 is not chosen
        await pilot.press("space", "down", "down", "space")  # lr1e-4 and lr2e-4 off: lr5e-5 only
        await until(pilot, shows(app, "3 runs (1 variants x 3 seeds)"))
        lines = screen_text(app).splitlines()
        assert any("[ ] lr1e-4" in ln for ln in lines) and any("[x] lr5e-5" in ln for ln in lines)
        assert any("[ ] lr2e-4" in ln for ln in lines)
        await pilot.press("tab", "enter")  # from the seeds field (Enter in the list would choose lr2e-4 again)
        await until(pilot, shows(app, "refused: lr5e-5 has no passed pilot"), what="the guard's refusal")
        assert f"then {key} on the campaign screen" in " ".join(screen_text(app).split())
        assert " P " not in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen))
        await pilot.press(key)  # the key the words name does what they say
        await until(pilot, lambda: isinstance(app.screen, StartPilotScreen), what="the pilot dialog")


async def test_a_remote_run_of_a_ray_series_is_followed_live_with_its_node(make_app, recorded: Path, tmp_path: Path):
    # A run of a series on Ray: the head holds its folder, with remote.json and no local process; its files arrive
    # in chunks from the node (cockpit.cluster.mirror, what the series' keeper applies). The TUI follows it live,
    # as a local run, and says which node it trains on.
    import time

    from cockpit import launch, runs
    from cockpit.cluster.mirror import Mirror, Receiver

    rid, head = launch.new_run(recorded, "lr5e-5", 3, kind="train", starter=lambda *a, **k: 0)
    info = {"address": "10.0.0.1:6379", "task_id": "t1", "node_id": "9c3e71f0d2aa" * 4, "hostname": "box2"}
    runs.write_remote(head, {**info, "beat": time.time(), "ended": False, "keeper": "series:x:k"})
    node = tmp_path / "node" / "runs" / rid
    node.mkdir(parents=True)
    mirror, receiver = Mirror(node), Receiver(head)
    mirror.prime()
    w = ev.EventWriter(node / ev.EVENTS_FILE)

    def relay() -> None:
        for chunk in mirror.scan():
            receiver.apply(chunk)

    app = make_app(timing=FAST)
    async with app.run_test(size=SIZE) as pilot:
        w.emit(ev.RUN_START, run_id=rid, variant="lr5e-5", seed=3, run_kind="train", phases=["train"])
        w.emit(ev.PHASE_START, phase="train", inputs={"updates": 4})
        w.emit(ev.STEP, step=1, loss=4.4, lr=5e-5, grad_norm=0.9, examples=16, duration_s=0.4, phase="train")
        relay()
        app.open_run(rid)
        await until(pilot, lambda: isinstance(app.screen, TrainRunScreen) and app.screen.run_id == rid)
        await until(pilot, shows(app, "on node box2 (9c3e71f0d2aa)"), what="the node in the head")
        await until(pilot, shows(app, "running"), what="a remote run alive by its record")
        assert "loss 4.4" in screen_text(app) or "4.4" in screen_text(app)
        for k in range(2, 5):
            w.emit(
                ev.STEP, step=k, loss=4.5 - 0.1 * k, lr=5e-5, grad_norm=0.9, examples=16, duration_s=0.4, phase="train"
            )
        relay()
        await until(pilot, shows(app, "update 4"), what="the updates relayed from the node")
        w.emit(ev.RUN_END, status="completed", stop_reason="budget reached: 4 updates", phase="train", exit_code=0)
        w.close()
        relay()
        runs.write_remote(head, {**info, "beat": time.time(), "ended": True, "keeper": "series:x:k"})
        await until(pilot, shows(app, "budget reached: 4 updates"), what="its end, relayed")
        assert "completed" in screen_text(app) and "on node box2" in screen_text(app)
    receiver.close()


async def test_a_series_on_the_notebooks_ray_cluster_goes_there_and_stops_from_the_palette(
    make_app, recorded: Path, launcher, monkeypatch: pytest.MonkeyPatch
):
    """With ``[cluster] ray`` in the notebook, the dialog's series is ``cockpit series --ray`` in the background
    (the Ray driver is that process, never the TUI), with the dialog's variants, seeds and override; the
    palette's stop ends that command, and no local run is started."""
    import subprocess

    from cockpit import series as sr

    nbm.mutate(nbm.find(recorded), lambda nb: setattr(nb, "cluster", nbm.ClusterSpec(ray="127.0.0.1:6379")))
    started: list[list[str]] = []

    def background(campaign_dir: Path, argv: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        started.append(argv)
        log = campaign_dir / "runs" / ".series-test.log"
        log.write_text("")
        proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
        return proc, log

    monkeypatch.setattr(sr, "in_background", background)
    app = make_app(timing=FAST)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("S")
        await until(pilot, shows(app, "9 runs (3 variants x 3 seeds)"))
        await pilot.press("space", "down", "down", "space")  # lr5e-5 only
        await pilot.press("tab", *["backspace"] * 5, *"3,4")
        await until(pilot, shows(app, "2 runs (1 variants x 2 seeds)"))
        await pilot.press("enter")
        await until(pilot, shows(app, "refused: lr5e-5 has no passed pilot"), what="the guard's refusal")
        await pilot.press(*"a Ray test", "enter")
        await until(pilot, lambda: bool(started), what="cockpit series --ray started")
        argv = started[0]
        assert argv[:2] == ["--ray", "127.0.0.1:6379"], argv
        assert argv[argv.index("--variants") + 1] == "lr5e-5" and argv[argv.index("--seeds") + 1] == "3,4"
        assert argv[argv.index("--without-pilot") + 1] == "a Ray test"
        await until(pilot, lambda: "2 runs on the Ray cluster at 127.0.0.1:6379" in said(app), what="said")
        assert not launcher.started  # nothing on this box: the runs are the cluster's
        proc = app.series.remote.proc
        assert app.series.running and "on the Ray cluster at 127.0.0.1:6379" in app.series.status()
        await pilot.press("ctrl+p", *"stop the series")
        await until(pilot, shows(app, "Stop the series"))
        await pilot.press("enter")
        await until(pilot, shows(app, "Stop the series on the Ray cluster at 127.0.0.1:6379?"))
        await pilot.press("y")
        await until(pilot, lambda: f"the series command (pid {proc.pid}) ended" in said(app), what="stopped")
        assert proc.poll() is not None and not app.series.running
