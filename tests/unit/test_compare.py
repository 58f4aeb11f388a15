"""compare: seed statistics against hand-computed values, the "not distinguishable" rule, failed runs
listed with reasons, and memory variants flagged when they change the question (fabricated run folders)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from cockpit import compare as cmp
from cockpit import events as ev
from cockpit import notebook as nbm
from cockpit import runs
from cockpit.cli import main as cli

GiB = 2**30
MiB = 2**20


# --------------------------------------------------------------------------- statistics by hand


def test_stats_match_hand_computed_values() -> None:
    s = cmp.stats([4.0, 4.2, 4.7])
    # mean 12.9 / 3 = 4.3; deviations -0.3, -0.1, 0.4; squares 0.09 + 0.01 + 0.16 = 0.26; / (3 - 1) = 0.13
    assert s.n == 3
    assert s.mean == pytest.approx(4.3)
    assert s.std == pytest.approx(math.sqrt(0.13))  # 0.36056: the sample standard deviation, n - 1
    assert (s.min, s.max) == (4.0, 4.7)
    assert s.spread == pytest.approx(0.7)
    one = cmp.stats([2.5])
    assert (one.n, one.mean, one.std, one.min, one.max, one.spread) == (1, 2.5, None, 2.5, 2.5, None)
    assert cmp.stats([]).n == 0


def test_not_distinguishable_rule() -> None:
    ref = cmp.stats([4.0, 4.2, 4.7])  # spread 0.7
    close = cmp.stats([4.1, 4.3, 4.4])  # mean 4.2667: difference -0.0333, within 0.7
    assert cmp.distinguish(close, ref)[0] == "not distinguishable"
    far = cmp.stats([3.0, 3.1, 3.2])  # mean 3.1: difference -1.2, more than 0.7
    assert cmp.distinguish(far, ref)[0] == "better"
    assert cmp.distinguish(far, ref, higher_is_better=True)[0] == "worse"
    wide = cmp.stats([2.0, 3.0, 4.0])  # mean 3.0: difference -1.3, but its own spread is 2.0
    assert cmp.distinguish(wide, ref)[0] == "not distinguishable"
    verdict, sentence = cmp.distinguish(cmp.stats([1.0]), ref)
    assert verdict == "not distinguishable" and "no spread" in sentence  # one seed: nothing is distinguishable
    edge = cmp.stats([3.6, 3.5, 4.2])  # mean 3.7667, range 0.7: difference -0.5333 within 0.7
    assert cmp.distinguish(edge, ref)[0] == "not distinguishable"


# --------------------------------------------------------------------------- fabricated campaign


def _train(
    campaign: Path,
    variant: str,
    seed: int,
    value: float | None,
    status: str = "completed",
    reason: str = "budget reached: 200 updates",
    follows: str = "",
    overrides: dict | None = None,
) -> str:
    rid, d = runs.create_run(campaign, variant, seed, kind="train", follows=follows, overrides=overrides)
    w = ev.EventWriter(d / ev.EVENTS_FILE)
    w.emit(ev.RUN_START, run_id=rid, run_kind="train", variant=variant, seed=seed)
    w.emit(ev.STEP, step=1, loss=4.5, lr=1e-4, grad_norm=1.0, examples=16, duration_s=0.1, phase="train")
    if value is not None:
        w.emit(ev.EVAL, step=200, loss=value, metrics={})
    w.emit(ev.RUN_END, status=status, stop_reason=reason, phase="train", exit_code=0, duration_s=1.0)
    w.close()
    if status != "crashed":
        (d / "metrics.json").write_text(
            json.dumps(
                {
                    "final_val_loss": value,
                    "best_val_loss": value,
                    "best_step": 200,
                    "updates": 200 if value else 7,
                    "planned_updates": 200,
                    "stop_reason": reason,
                    "status": status,
                    "step_time_s": 0.1,
                    "eval_time_s": 0.1,
                    "save_time_s": 0.1,
                    "examples_seen": 3200,
                    "seed": seed,
                    "variant": variant,
                    "final_metrics": {},
                }
            )
        )
    return rid


def _gate(phase: str, rss_peak: int, duration: float, **extra: object) -> dict:
    return dict(
        phase=phase,
        verdict="pass",
        checks=[],
        inputs=extra.pop("inputs", {}),
        duration_s=duration,
        mem={"torch": None, "nvml": None, "rss": rss_peak, "rss_peak": rss_peak, "baseline": None},
        **extra,
    )


def _pilot(
    campaign: Path,
    variant: str,
    peak_mib: float,
    step_s: float,
    max_length: int,
    truncation: dict | None,
    status: str = "passed",
) -> str:
    rid, d = runs.create_run(campaign, variant, 0, kind="pilot")
    w = ev.EventWriter(d / ev.EVENTS_FILE)
    w.emit(ev.RUN_START, run_id=rid, run_kind="pilot", stack={"memory_total": 64 * GiB, "gpus": []})
    data = {"inputs": {"microbatch": 2, "max_length": max_length}}
    if truncation is not None:
        data["truncation"] = truncation
    w.emit(ev.GATE, **_gate("data", int(200 * MiB), 0.2, **data))
    w.emit(ev.GATE, **_gate("update_first", int(peak_mib * 0.9 * MiB), step_s * 1.5))
    w.emit(ev.STEP, step=2, loss=4.4, lr=1e-4, grad_norm=1.0, examples=16, duration_s=step_s, phase="update_second")
    w.emit(ev.GATE, **_gate("update_second", int(peak_mib * MiB), step_s))
    w.emit(
        ev.RUN_END,
        status=status,
        stop_reason="every gate passed" if status == "passed" else "gate failed: data",
        phase="export",
        exit_code=0 if status == "passed" else 1,
    )
    w.close()
    return rid


@pytest.fixture
def fabricated(campaign: Path) -> Path:
    def setup(nb: nbm.Notebook) -> None:
        nb.runs = []
        nb.variants += [
            nbm.Variant(id="len24", kind="memory", set={"max_length": 24}, differs="max_length 24"),
            nbm.Variant(id="len32", kind="memory", set={"max_length": 32}, differs="max_length 32"),
            nbm.Variant(id="mb1", kind="memory", set={"microbatch": 1}, differs="microbatch 1, accumulation kept"),
            nbm.Variant(id="mb1x16", kind="memory", set={"microbatch": 1, "accumulation": 16}, differs="same batch"),
            nbm.Variant(id="len16", kind="memory", set={"max_length": 16}, differs="max_length 16"),
        ]

    nbm.mutate(campaign, setup)
    for seed, v in enumerate([4.0, 4.2, 4.7]):
        _train(campaign, "lr1e-4", seed, v)
    for seed, v in enumerate([4.1, 4.3, 4.4]):
        _train(campaign, "lr5e-5", seed, v)
    first = _train(campaign, "lr2e-4", 0, 9.0)
    _train(campaign, "lr2e-4", 0, 3.0, follows=first)  # the later run of seed 0 supersedes the earlier one
    _train(campaign, "lr2e-4", 1, 3.1)
    _train(
        campaign,
        "lr2e-4",
        2,
        None,
        status="diverged",
        reason="diverged: loss 19 at update 7 is above 4 x its starting value 4.5",
    )
    _train(campaign, "lr1e-4", 0, 2.0, overrides={"updates": 20, "epochs": None, "examples": None})
    _pilot(campaign, "lr1e-4", 330, 0.08, 48, {"examples": 0, "lose_target_tokens": 0, "no_target_left": 0})
    _pilot(campaign, "len24", 250, 0.05, 24, {"examples": 1900, "lose_target_tokens": 1700, "no_target_left": 12})
    _pilot(campaign, "len32", 280, 0.06, 32, None)
    _pilot(campaign, "mb1", 300, 0.09, 48, None)
    # a failed pilot has no memory figures to compare, but its data gate's truncation count still stands
    _pilot(
        campaign,
        "len16",
        200,
        0.04,
        16,
        {"examples": 1900, "lose_target_tokens": 1900, "no_target_left": 300},
        status="failed",
    )
    return campaign


def test_quality_groups_from_fabricated_runs(fabricated: Path) -> None:
    data = cmp.collect(fabricated)
    q = {(g["variant"], g["tag"]): g for g in data["quality"]}
    ref = q[("lr1e-4", "")]
    assert ref["stats"]["n"] == 3 and ref["stats"]["mean"] == pytest.approx(4.3)
    assert ref["stats"]["std"] == pytest.approx(math.sqrt(0.13))
    assert ref["seeds"] == {0: 4.0, 1: 4.2, 2: 4.7}
    half = q[("lr5e-5", "")]
    assert half["verdict"] == "not distinguishable" and half["diff"] == pytest.approx(4.2667 - 4.3, abs=1e-4)
    double = q[("lr2e-4", "")]
    assert double["seeds"] == {0: 3.0, 1: 3.1}  # the superseded 9.0 and the diverged seed are not averaged
    assert double["not_completed"] == {"diverged": 1}
    assert double["stats"]["mean"] == pytest.approx(3.05)
    assert double["verdict"] == "better"  # -1.25, more than the larger spread 0.7
    quick = q[("lr1e-4", "updates=20")]  # a budget override is its own group, never pooled
    assert quick["stats"]["n"] == 1
    assert [r["status"] for r in data["not_completed"]] == ["diverged"]
    assert data["not_completed"][0]["stop_reason"].startswith("diverged: loss 19")
    assert [r["superseded_by"] != "" for r in data["superseded"]] == [True]
    assert ref["target_reached"] is False and "0/3 seeds reach 2" in ref["target"]


def test_memory_variants_flagged(fabricated: Path) -> None:
    data = cmp.collect(fabricated)
    flags = {v: [f["flag"] for f in fl] for v, fl in data["flags"].items()}
    assert "shorter max_length truncates targets" in flags["len24"]
    detail = next(f["detail"] for f in data["flags"]["len24"] if f["flag"].startswith("shorter"))
    assert "1700 of 1900 examples (89%) lose target tokens" in detail and "12 have no target left" in detail
    # a memory variant nobody trained: its quality is flagged as never measured
    assert "quality not measured" in flags["len24"] and "quality not measured" not in flags["lr1e-4"]
    assert "shorter max_length: truncation not measured" in flags["len32"]
    assert "effective batch changed" in flags["mb1"]
    assert "effective batch changed" not in flags["mb1x16"]
    assert not any("truncat" in f for f in flags["lr1e-4"])
    mem = data["memory"]
    assert mem["lr1e-4"]["peak"] == 330 * MiB and mem["lr1e-4"]["step_time_s"] == 0.08
    assert mem["len24"]["phases"]["update_second"]["peak"] == 250 * MiB
    assert mem["mb1x16"]["run"] is None  # no passed pilot: said, not invented
    assert mem["len16"]["run"] is None and mem["len16"]["peak"] is None
    assert "shorter max_length truncates targets" in flags["len16"]


def test_render_and_cli(fabricated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    console = Console(record=True, width=220, file=io.StringIO())
    cmp.render(cmp.collect(fabricated), console)
    text = console.export_text()
    assert "not distinguishable" in text and "sample standard deviation (n-1)" in text
    assert "diverged: loss 19" in text and "superseded" in text
    assert "len24: shorter max_length truncates targets" in text
    assert "no passed pilot" in text
    assert cli(["compare", str(fabricated), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reference"] == "lr1e-4" and out["quality"]


def test_compare_without_runs(campaign: Path) -> None:
    nbm.mutate(campaign, lambda nb: setattr(nb, "runs", []))
    console = Console(record=True, width=120, file=io.StringIO())
    cmp.render(cmp.collect(campaign), console)
    assert "no train runs yet" in console.export_text()


def test_curves_reads_curve_csv(campaign: Path) -> None:
    rid, d = runs.create_run(campaign, None, 0, kind="train")
    (d / "curve.csv").write_text("step,loss,lr,grad_norm,examples_seen,elapsed_s\n1,4.5,0.0001,,16,0.1\n")
    got = cmp.curves(campaign, [rid, "r9999"])
    assert got[rid] == [
        {"step": 1.0, "loss": 4.5, "lr": 0.0001, "grad_norm": None, "examples_seen": 16.0, "elapsed_s": 0.1}
    ]
    assert got["r9999"] == []


def test_a_step_time_within_the_spread_is_no_difference() -> None:
    from cockpit.compare.render import _step_cell

    mem = {
        "ref": {"step_time_s": 0.050, "step_min_s": 0.045, "step_max_s": 0.090, "step_n": 5},
        "noisy": {"step_time_s": 0.070, "step_min_s": 0.060, "step_max_s": 2.7, "step_n": 5},
        "slow": {"step_time_s": 0.200, "step_min_s": 0.190, "step_max_s": 0.210, "step_n": 5},
    }
    assert _step_cell(mem, "noisy", "ref").endswith("(within spread)")
    assert _step_cell(mem, "slow", "ref").endswith("(4.00x)")
    assert _step_cell(mem, "ref", "ref") == "0.05 [0.045-0.09]"


def test_cockpit_s_own_check_phases_never_set_a_pilot_s_peak(campaign: Path) -> None:
    """The data and overfit gates each hold a second model (the alignment probe, the fresh model that overfits)
    that the long run never does: a pilot's peak, compare's and the sheet's come from the other phases."""
    rid = _pilot(campaign, "lr1e-4", 300, 0.08, 48, None)
    d = campaign / "runs" / rid
    w = ev.EventWriter(d / ev.EVENTS_FILE)  # appended after run_end, as extra gates of the same pilot
    w.emit(ev.GATE, **_gate("overfit", int(6000 * MiB), 2.0))
    w.emit(ev.GATE, **_gate("data", int(5000 * MiB), 0.2))
    w.close()
    assert runs.state(d).peak_mib == 300
    assert cmp.collect(campaign)["memory"]["lr1e-4"]["peak"] == 300 * MiB
    assert cmp.collect(campaign)["memory"]["lr1e-4"]["phases"]["overfit"]["peak"] == 6000 * MiB  # still shown
