"""Series runs end to end on the CPU with tiny budgets: files, stop rules, follows, the CLI.

Real training processes (``python -m cockpit.pilot``) on a tiny model; the
runs of the stop-rule cases start side by side so the module stays fast.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from cockpit import events as ev
from cockpit import launch, runs
from cockpit import notebook as nbm
from cockpit import series as sr
from cockpit.cli import main as cli
from cockpit.errors import UsageError

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

DEMO = Path(__file__).resolve().parents[2] / "cockpit" / "templates" / "demo.toml"

TINY = {"d_model": 16, "n_layers": 1, "n_heads": 2, "train_examples": 640, "val_examples": 32, "test_examples": 32}


def tiny_campaign(root: Path, name: str, **stop: object) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    shutil.copy(DEMO, folder / "campaign.toml")

    def shrink(nb: nbm.Notebook) -> None:
        nb.task.params.update(TINY)
        nb.batch.updates = 10
        nb.validation.every_updates = 5
        nb.runs = []
        nb.decisions = []
        for k, v in stop.items():
            setattr(nb.stop, k, v)

    nbm.mutate(folder, shrink)
    return folder


def wait_all(dirs: list[Path], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    for d in dirs:
        assert launch.wait(d, timeout=max(1.0, deadline - time.monotonic())), f"{d} still running"


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def series_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Every case started at once: two seeds, a forced divergence, patience, wall clock, SIGTERM."""
    from cockpit.launch import new_run as start

    root = tmp_path_factory.mktemp("series")
    main = tiny_campaign(root, "main")
    patient = tiny_campaign(root, "patient", patience=2)
    clock = tiny_campaign(root, "clock", wall_clock_minutes=0.0005)
    nbm.mutate(patient, lambda nb: setattr(nb.validation, "every_updates", 2))
    env = {"OMP_NUM_THREADS": "1"}
    nb = nbm.load(main)
    items, _ = sr.plan(nb, ["lr1e-4"], [0, 1])
    series = sr.Series(main, items, parallel=2, env=env)
    series.poll()
    out: dict[str, object] = {"main": main, "patient": patient, "clock": clock}
    out["diverged"] = start(
        main, "lr2e-4", 0, kind="train", overrides={"lr": 50.0, "optimizer": "sgd", "updates": 15}, env=env
    )
    # lr 0: the validation loss cannot improve, so patience 2 ends the run at its second non-improving validation
    out["patience"] = start(
        patient, None, 0, kind="train", overrides={"lr": 0.0, "optimizer": "sgd", "updates": 40}, env=env
    )
    out["clock"] = start(clock, None, 0, kind="train", overrides={"updates": 100000}, env=env)
    out["term"] = start(main, None, 5, kind="train", overrides={"updates": 100000}, env=env)
    term_dir = out["term"][1]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(e["kind"] == ev.STEP for e in ev.read_events(term_dir / ev.EVENTS_FILE)):
            break
        time.sleep(0.2)
    out["term_stop"] = launch.stop(term_dir, grace_s=30)
    series.run(poll_s=0.2)
    out["series"] = series
    wait_all([out[k][1] for k in ("diverged", "patience", "clock", "term")])
    return out


def test_completed_run_keeps_every_file(series_runs: dict) -> None:
    s = series_runs["series"].started[0]
    d = s.dir
    assert runs.state(d).status == "completed"
    curve = read_csv(d / "curve.csv")
    assert list(curve[0]) == ["step", "loss", "lr", "grad_norm", "examples_seen", "elapsed_s"]
    assert [int(r["step"]) for r in curve] == list(range(1, 11))
    assert int(curve[-1]["examples_seen"]) == 10 * 16
    evals = read_csv(d / "evals.csv")
    assert [int(r["step"]) for r in evals] == [5, 10]  # every 5 updates; the last one is also the end
    assert {"step", "val_loss", "token_accuracy", "exact_match"} <= set(evals[0])
    preds = [json.loads(line) for line in (d / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == TINY["val_examples"]
    assert len({p["id"] for p in preds}) == len(preds)
    assert all({"id", "target", "prediction", "n_targets", "n_correct", "correct"} <= set(p) for p in preds)
    # every row decoded, short rows included; the text matches exactly when every target token does
    assert all((p["prediction"] == p["target"]) == p["correct"] for p in preds)
    assert all(p["n_targets"] == len(p["target_ids"]) == len(p["predicted_ids"]) for p in preds)
    m = json.loads((d / "metrics.json").read_text())
    for key in (
        "final_val_loss",
        "best_val_loss",
        "best_step",
        "updates",
        "stop_reason",
        "status",
        "step_time_s",
        "eval_time_s",
        "save_time_s",
        "examples_seen",
        "seed",
        "variant",
    ):
        assert key in m, key
    assert m["status"] == "completed" and m["updates"] == 10 and m["stop_reason"].startswith("budget reached")
    assert m["final_val_loss"] == pytest.approx(float(evals[-1]["val_loss"]))
    assert m["seed"] == 0 and m["variant"] == "lr1e-4" and m["examples_seen"] == 160
    assert (d / "checkpoint.pt").stat().st_size > 0
    # the trained model, not only the pilot's: exported, reloaded in a new process, control inputs replayed
    assert m["replay"]["equal"] is True and "bit-identical" in m["replay"]["detail"], m["replay"]
    assert (d / "artifact" / "model.pt").is_file() and (d / "artifact" / "manifest.json").is_file()
    manifest = json.loads((d / "artifact" / "manifest.json").read_text())
    assert manifest["data_revision"]["sha256"] == m["data_revision"]["sha256"] and manifest["task_code"]
    evs = ev.read_events(d / ev.EVENTS_FILE)
    start = evs[0]
    assert start["kind"] == ev.RUN_START and start["run_kind"] == "train"
    steps = [e for e in evs if e["kind"] == ev.STEP]
    assert len(steps) == 10 and all(e["phase"] == "train" for e in steps)
    assert {"step", "loss", "lr", "grad_norm", "examples", "duration_s"} <= set(steps[0])
    assert [e["step"] for e in evs if e["kind"] == ev.EVAL] == [5, 10]
    end = evs[-1]
    assert end["kind"] == ev.RUN_END and end["status"] == "completed" and end["exit_code"] == 0


def test_seeds_differ_and_rows_recorded(series_runs: dict) -> None:
    a, b = series_runs["series"].started
    la = read_csv(a.dir / "curve.csv")[0]["loss"]
    lb = read_csv(b.dir / "curve.csv")[0]["loss"]
    assert la != lb  # seed 0 and seed 1 start from different weights and data orders
    nb = nbm.load(series_runs["main"])
    rows = {r.id: r for r in nb.runs}
    assert rows[a.run_id].kind == "train" and rows[a.run_id].status == "completed"
    assert rows[b.run_id].seed == 1


def test_forced_divergence_keeps_row_curve_and_reason(series_runs: dict) -> None:
    rid, d = series_runs["diverged"]
    st = runs.state(d)
    assert st.status == "diverged"
    assert st.stop_reason.startswith(("diverged: loss", "non-finite")), st.stop_reason
    assert st.run_end["exit_code"] == int(ev.ExitCode.NONFINITE)
    curve = read_csv(d / "curve.csv")
    assert 1 <= len(curve) < 15
    m = json.loads((d / "metrics.json").read_text())
    assert m["status"] == "diverged" and m["updates"] == len(curve)
    row = nbm.load(series_runs["main"]).run(rid)
    assert row.status == "diverged" and row.stop_reason == st.stop_reason
    frozen = runs.read_run_toml(d)
    assert frozen["params"]["lr"] == 50.0 and frozen["params"]["optimizer"] == "sgd"


def test_patience_ends_completed_with_reason(series_runs: dict) -> None:
    _, d = series_runs["patience"]
    st = runs.state(d)
    assert st.status == "completed", st.stop_reason
    assert st.stop_reason.startswith("patience"), st.stop_reason
    evals = read_csv(d / "evals.csv")
    assert [int(r["step"]) for r in evals] == [2, 4, 6]  # best at 2, then two validations without improvement


def test_wall_clock_ends_completed(series_runs: dict) -> None:
    _, d = series_runs["clock"]
    st = runs.state(d)
    assert st.status == "completed" and st.stop_reason.startswith("wall-clock limit"), st.stop_reason
    assert (d / "predictions.jsonl").exists()


def test_sigterm_stops_and_keeps_files(series_runs: dict) -> None:
    _, d = series_runs["term"]
    assert series_runs["term_stop"].startswith("stopped")
    st = runs.state(d)
    assert st.status == "stopped", st.stop_reason
    assert st.run_end["exit_code"] == int(ev.ExitCode.STOPPED)
    assert len(read_csv(d / "curve.csv")) >= 1
    assert json.loads((d / "metrics.json").read_text())["status"] == "stopped"


def test_rerun_follows_the_diverged_run(series_runs: dict) -> None:
    """The CLI end to end: a rerun is a new run with a new id that names the run it follows."""
    main = series_runs["main"]
    old, _ = series_runs["diverged"]
    before = nbm.load(main).run(old)
    code = cli(["series", str(main), "--rerun", old, "--updates", "3", "--json", "--without-pilot", "test"])
    assert code == 0
    nb = nbm.load(main)
    new = [r for r in nb.runs if r.follows == old]
    assert len(new) == 1 and new[0].id != old
    assert new[0].variant == "lr2e-4" and new[0].seed == 0 and new[0].status == "completed"
    after = nb.run(old)
    assert (after.status, after.stop_reason) == (before.status, before.stop_reason)  # nothing replaced
    assert runs.read_run_toml(runs.run_dir(main, new[0].id))["params"]["updates"] == 3


def test_plan_follows_latest_and_skips_done(campaign: Path) -> None:
    nb = nbm.load(campaign)
    nb.runs = []
    items, _ = sr.plan(nb, None, [0, 1])
    assert [(i.variant, i.seed, i.follows) for i in items] == [
        (v, s, "") for v in ("lr1e-4", "lr5e-5", "lr2e-4") for s in (0, 1)
    ]
    rid, _ = runs.create_run(campaign, "lr5e-5", 1, kind="train")
    rid2, _ = runs.create_run(campaign, "lr5e-5", 1, kind="train", follows=rid)
    nb = nbm.load(campaign)
    items, _ = sr.plan(nb, ["lr5e-5"], [0, 1])
    assert [(i.seed, i.follows) for i in items] == [(0, ""), (1, rid2)]
    nbm.mutate(campaign, lambda n: setattr(n.run(rid2), "status", "completed"))
    items, notes = sr.plan(
        nbm.load(campaign),
        ["lr5e-5"],
        [0, 1],
        skip_done=True,
    )
    assert [i.seed for i in items] == [0] and rid2 in notes[0]
    items, _ = sr.plan(
        nbm.load(campaign),
        ["lr5e-5"],
        [1],
        skip_done=True,
        overrides=sr.budget_overrides(5),
    )
    assert [i.seed for i in items] == [1]  # a different budget is not the same run


def test_parse_seeds_and_overrides() -> None:
    assert sr.parse_seeds("0,1,2") == [0, 1, 2]
    assert sr.parse_seeds("0-3,7") == [0, 1, 2, 3, 7]
    for bad in ("", "a", "3-1", "1,1"):
        with pytest.raises(UsageError):
            sr.parse_seeds(bad)
    assert sr.budget_overrides(20) == {"updates": 20, "epochs": None, "examples": None}
    with pytest.raises(UsageError):
        sr.budget_overrides(0)


def test_dry_run_and_unknown_variant(campaign: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["series", str(campaign), "--seeds", "0,1", "--dry-run", "--without-pilot", "a dry run"]) == 0
    err = capsys.readouterr().err
    assert "series of 6 runs" in err and "lr2e-4 seed 1" in err
    assert not (campaign / "runs").exists() or not any((campaign / "runs").iterdir())
    assert cli(["series", str(campaign), "--variants", "nope", "--dry-run"]) == 2
    assert "no variant 'nope'" in capsys.readouterr().err


def test_parallel_refused_when_pilot_peaks_do_not_fit(campaign: Path) -> None:
    rid, d = runs.create_run(campaign, None, 0)
    w = ev.EventWriter(d / ev.EVENTS_FILE)
    w.emit(ev.RUN_START, run_id=rid, run_kind="pilot", stack={"memory_total": 4 * 2**30, "gpus": []})
    w.emit(
        ev.GATE,
        phase="worst_case",
        verdict="pass",
        checks=[],
        inputs={},
        duration_s=0.1,
        mem={"torch": None, "nvml": None, "rss": 3 * 2**30, "rss_peak": 3 * 2**30, "baseline": None},
    )
    w.emit(ev.RUN_END, status="passed", stop_reason="every gate passed", phase="export", exit_code=0)
    w.close()
    with pytest.raises(UsageError, match="more than"):
        sr.parallel_check(campaign, ["lr1e-4"], 2)
    assert sr.parallel_check(campaign, ["lr1e-4"], 1) == []
    with pytest.raises(UsageError, match="more than"):  # a learning-rate variant shares the reference's pilot
        sr.parallel_check(campaign, ["lr5e-5"], 2)
    nbm.mutate(
        campaign,
        lambda nb: nb.variants.append(nbm.Variant("bf16", set={"precision": "bf16"}, differs="bf16", kind="memory")),
    )
    notes = sr.parallel_check(campaign, ["bf16"], 2)  # a memory variant needs a pilot of its own
    assert "no passed pilot for bf16" in notes[0]


def test_no_torch_in_orchestration() -> None:
    import subprocess
    import sys

    code = "import sys, cockpit.series, cockpit.compare, cockpit.commands.series, cockpit.commands.compare; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}, check=True)
    assert out.stdout.strip() == "False"


def test_a_run_resumed_here_after_its_ray_node_was_lost_lives_by_its_local_pid(tmp_path: Path) -> None:
    camp = tiny_campaign(tmp_path, "was_remote")
    _, rdir = runs.create_run(camp, "lr1e-4", 0, kind="train")
    runs.write_remote(rdir, {"beat": time.time(), "ended": True, "reason": "its node was lost (a test)"})
    assert runs.state(rdir).status == "crashed"
    launch.start(rdir, env={"OMP_NUM_THREADS": "1"})
    try:
        assert runs.remote_info(rdir) is None  # the Ray record of its earlier process no longer decides
        assert runs.is_alive(rdir)
    finally:
        assert launch.stop(rdir, grace_s=20).startswith(("stopped", "killed"))
