"""The rental plan: hours per run from measured times only, packages filled in priority order."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit import plan as pl
from cockpit.cli import main
from tests.fake_runs import gpu_stack, make_campaign, series_run, standard_gates, write_run


def _pilot(camp: Path, step_s: float, variant: str | None = None) -> str:
    rid, _ = write_run(
        camp,
        variant=variant,
        stack=gpu_stack(),
        gates=standard_gates(20_000, 30_000, 600, step_s=step_s),
        steps={"update_second": step_s, "worst_case": step_s * 3},
    )
    return rid


def test_nothing_fits_in_3_days(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    camp = make_campaign(tmp_path, updates=200_000)  # 200,000 updates x 5 s = 277.8 h per run
    rid = _pilot(camp, step_s=5.0)
    p = pl.build(nbm.load(camp))
    c = p.costs["lr1e-4"]
    validations = 200_000 // 50
    saves = 1 + (200_000 - 1) // 50  # a checkpoint every 50 updates ([checkpoints]) and the final save
    assert c.updates == 200_000 and c.validations == validations and c.saves == saves
    assert c.hours == pytest.approx((200_000 * 5.0 + validations * 2.0 + saves * 4.0) / 3600)
    assert "median of 1 timed update" in c.timing.step_source and rid in c.timing.step_source
    three, seven, thirty = p.packages
    assert three.fits == [] and seven.fits == []  # 64.8 h and 151.2 h available
    assert [(v, s) for v, s, _ in thirty.fits] == [("lr1e-4", 0), ("lr5e-5", 0)]  # 648 h: two runs of 280 h
    assert thirty.left_out[0][:2] == ("lr2e-4", 0)
    assert main(["plan", str(camp)]) == 0
    out = capsys.readouterr().out
    assert "**3 days** (72 h)" in out and "**Nothing fits**: the first run in priority order (lr1e-4 seed 0)" in out
    assert "measured on: cuda:0" in out


def test_priority_is_seed_by_seed_reference_first_and_strict(tmp_path: Path) -> None:
    mb = {
        "id": "mb1",
        "set": {"microbatch": 1, "accumulation": 16},
        "differs": "microbatch 1",
        "why": "a batch variant",
        "kind": "quality",
    }
    camp = make_campaign(tmp_path, updates=3_400, variants=[mb])
    _pilot(camp, step_s=10.0)  # 3,400 x 10 s + 68 validations x 2 s + 68 saves x 4 s: 9.56 h per run
    _pilot(camp, step_s=1.0, variant="mb1")  # its own, shorter step: 0.98 h per run
    p = pl.build(nbm.load(camp), days=(3,), seeds=3, reserve_hours=10)
    assert p.costs["lr1e-4"].hours == pytest.approx((34_000 + 136 + 68 * 4) / 3600)
    assert p.order[:5] == [("lr1e-4", 0), ("lr5e-5", 0), ("lr2e-4", 0), ("mb1", 0), ("lr1e-4", 1)]
    pkg = p.packages[0]
    assert pkg.reserve_h == 10 and pkg.available_h == 62
    assert [(v, s) for v, s, _ in pkg.fits] == [(v, s) for s in (0, 1) for v in ("lr1e-4", "lr5e-5", "lr2e-4", "mb1")]
    # 2.6 h are left, enough for mb1 seed 2 (1.06 h), but nothing jumps the queue
    assert [(v, s) for v, s, _ in pkg.left_out] == [("lr1e-4", 2), ("lr5e-5", 2), ("lr2e-4", 2), ("mb1", 2)]
    assert pkg.available_h - pkg.used_h > p.costs["mb1"].hours


def test_series_times_win_over_the_pilot_and_say_from_how_many_updates(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    _pilot(camp, step_s=5.0)
    a, _ = series_run(camp, "lr1e-4", 0, 1.9, step_time_s=0.25, eval_time_s=1.5, save_time_s=0.5)
    b, _ = series_run(camp, "lr1e-4", 1, 1.95, step_time_s=0.3, eval_time_s=1.0, save_time_s=0.4)
    t = pl.build(nbm.load(camp)).costs["lr1e-4"].timing
    assert t.step_s == 0.3  # the slowest series run
    assert t.step_source.startswith("series: slowest of 2 runs") and a in t.step_source and b in t.step_source
    assert "(200, 200)" in t.step_source
    assert t.eval_s == 1.5 and t.save_s == 0.5


def test_a_variant_that_changes_the_step_is_never_given_a_borrowed_time(tmp_path: Path) -> None:
    mb = {
        "id": "mb1",
        "set": {"microbatch": 1, "accumulation": 16},
        "differs": "microbatch 1",
        "why": "a batch variant",
        "kind": "quality",
    }
    camp = make_campaign(tmp_path, variants=[mb])
    _pilot(camp, step_s=1.0)
    p = pl.build(nbm.load(camp))
    assert p.costs["lr5e-5"].timing.borrowed_from == "lr1e-4"  # only the learning rate differs
    assert p.costs["mb1"].hours is None and "mb1" in p.unplanned
    assert all(v != "mb1" for pkg in p.packages for v, _, _ in pkg.fits + pkg.left_out)
    text = "\n".join(pl.render(p))
    assert "- mb1: cannot be planned: no time per update measured for mb1" in text


def test_without_measurements_no_duration_is_stated(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    p = pl.build(nbm.load(camp))
    assert all(c.hours is None for c in p.costs.values())
    assert all(not pkg.fits and not pkg.left_out for pkg in p.packages)
    text = "\n".join(pl.render(p))
    assert "Nothing can be planned: no variant has a measured time per update" in text
    assert "Fits" not in text


def test_write_stores_the_smallest_package_that_holds_everything(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path, updates=20_000)
    _pilot(camp, step_s=5.0)  # 28 h per run, 252 h for 9: only the 30-day package holds them all
    assert main(["plan", str(camp), "--write", "--reserve-hours", "6"]) == 0
    r = nbm.load(camp).rental
    assert r.days == 30 and r.reserve_hours == 6
    assert r.plan.startswith("30 days: 6.0 h kept for evaluation and export; 9 runs")
    assert main(["plan", str(camp), "--write", "--choose", "3"]) == 0
    r = nbm.load(camp).rental
    assert r.days == 3 and "does not fit" in r.plan


def test_one_quality_check_run_is_budgeted_per_memory_variant(tmp_path: Path) -> None:
    mem = {"id": "half", "set": {"precision": "bf16"}, "differs": "bf16", "why": "memory", "kind": "memory"}
    camp = make_campaign(tmp_path, variants=[mem])
    _pilot(camp, step_s=1.0)
    _pilot(camp, step_s=0.6, variant="half")
    p = pl.build(nbm.load(camp), seeds=3)
    assert p.quality_checks == ["half"]  # the demo's other memory variants have no passed pilot here
    assert p.order[:4] == [("lr1e-4", 0), ("lr5e-5", 0), ("lr2e-4", 0), ("half", 0)]
    assert [s for v, s in p.order if v == "half"] == [0]  # one run, not one per seed
    text = "\n".join(pl.render(p))
    assert "one quality-check run: a memory variant whose quality was never measured" in text


def test_a_probed_script_s_validations_are_counted_as_the_script_runs_them(tmp_path: Path) -> None:
    """Issue 36: the plan of a probed script counted 6 validations (300 steps at [validation] every_updates 50, a
    setting of Cockpit's own loop) where the script evaluates every 100 steps, 3 times. The probe watched when."""
    import sys

    from cockpit.commands.probe import campaign_for
    from tests.fake_runs import cpu_stack, standard_gates, write_run

    path = campaign_for([sys.executable, "train.py"], tmp_path / "campaigns")
    camp = path.parent
    watched = ("stack", "forward", "update_second", "validation", "save")
    gates = [g for g in standard_gates(None, None) if g["phase"] in watched]
    rid, _ = write_run(
        camp,
        kind="probe",
        stack=cpu_stack(),
        gates=gates,
        steps={"update_second": 0.1},
        evals=[(100, 2.5), (200, 2.1)],
    )
    nb = nbm.load(camp)
    assert nb.validation.every_updates == 50  # the stand-in the script never reads
    p = pl.build(nb, updates=300)
    c = p.costs[nbm.SCRIPT_VARIANT]
    assert c.validations == 3
    text = "\n".join(pl.render(p))
    assert "+ 3 validations x" in text
    assert f"validations counted: 3 in 300 steps: probe {rid}: the script evaluated every 100 steps" in text


def test_boxes_say_what_n_boxes_buy_against_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    camp = make_campaign(tmp_path, updates=200_000)  # 280 h per run, 3 variants x 3 seeds: 9 runs
    _pilot(camp, step_s=5.0)
    nb = nbm.load(camp)
    one, three = pl.build(nb, gpus=1), pl.build(nb, gpus=1, boxes=3)
    assert (one.lanes, three.lanes, three.boxes) == (1, 3, 3)
    h = one.costs["lr1e-4"].hours
    assert one.wall_h() == pytest.approx(9 * h) and three.wall_h() == pytest.approx(3 * h)
    assert [len(p.fits) for p in three.packages] == [0, 0, 6]  # 648 h on each of 3 boxes: two runs each
    assert main(["plan", str(camp), "--gpus", "1", "--boxes", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 runs side by side on 3 boxes of 1 GPU each (a Ray cluster" in out
    assert "3 boxes against one, for every planned run (9 runs):" in out and "(3.00x sooner)" in out
    assert "the same money, sooner" in out
    assert "- 30 days: one box fits 2 runs, 3 boxes fit 6 (for 3x the rent)" in out
    assert main(["plan", str(camp), "--boxes", "0"]) != 0
