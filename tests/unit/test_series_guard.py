"""The series is where the money goes: it starts only behind a passed pilot of the same settings and task
code, never repeats a configuration that already failed without saying why, and keeps its protocol fixed."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from cockpit import launch, runs
from cockpit import notebook as nbm
from cockpit import series as sr
from cockpit.errors import UsageError
from tests.fake_runs import cpu_stack, make_campaign, standard_gates, write_run


def vet(nb: nbm.Notebook, variants: list[str], seeds: list[int], **kw: str) -> tuple[list[sr.Item], list[str]]:
    """Plan, then vet the plan as `cockpit series` and the TUI do; the items and the decisions made."""
    items, _ = sr.plan(nb, variants, seeds)
    return items, sr.guard(nb, items, **kw)


def passed_pilot(camp: Path, variant: str | None = None) -> str:
    rid, _ = write_run(camp, variant=variant, stack=cpu_stack(), gates=standard_gates(None, None))
    return rid


def test_no_pilot_refuses_and_names_the_command(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    with pytest.raises(UsageError) as exc:
        vet(nbm.load(camp), ["lr1e-4"], [0])
    msg = str(exc.value)
    assert "no pilot of lr1e-4 yet" in msg and f"cockpit pilot {camp} --variant lr1e-4" in msg
    assert "--without-pilot" in msg


def test_a_learning_rate_variant_shares_the_reference_pilot_a_memory_variant_does_not(tmp_path: Path) -> None:
    """The rule: a pilot vouches for variants that differ only in optimizer scalars (sr.SHARED_SCALARS)."""
    camp = make_campaign(tmp_path)
    nb = nbm.load(camp)
    groups = sr.pilot_groups(nb)
    assert groups[0] == ["lr1e-4", "lr5e-5", "lr2e-4"]
    assert ["bf16"] in groups and ["mb1x16"] in groups and len(groups) == len(nb.variants) - 2
    passed_pilot(camp)  # of the reference only
    items, decisions = vet(nbm.load(camp), ["lr1e-4", "lr5e-5", "lr2e-4"], [0])
    assert [i.variant for i in items] == ["lr1e-4", "lr5e-5", "lr2e-4"] and decisions == []
    with pytest.raises(UsageError) as exc:
        vet(nbm.load(camp), ["bf16"], [0])
    assert "no pilot of bf16 yet" in str(exc.value) and f"cockpit pilot {camp} --all" in str(exc.value)
    # momentum allocates SGD's buffer: never shared
    assert "momentum" not in sr.SHARED_SCALARS and "lr" in sr.SHARED_SCALARS


def test_a_failed_pilot_is_named(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    rid, _ = write_run(
        camp, stack=cpu_stack(), gates=standard_gates(None, None), status="failed", reason="gate failed: data"
    )
    with pytest.raises(UsageError, match=f"latest pilot {rid} ended failed \\(gate failed: data\\)"):
        vet(nbm.load(camp), ["lr1e-4"], [0])


def test_a_passed_pilot_of_the_same_settings_and_code_lets_it_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    camp = make_campaign(tmp_path)
    pid = passed_pilot(camp)
    items, _ = vet(nbm.load(camp), ["lr1e-4"], [0, 1])
    assert [i.seed for i in items] == [0, 1]
    nbm.mutate(camp, lambda nb: setattr(nb.training, "precision", "bf16"))
    with pytest.raises(UsageError, match=f"pilot {pid} ran with other settings \\(precision fp32 -> bf16\\)"):
        vet(nbm.load(camp), ["lr1e-4"], [0])
    nbm.mutate(camp, lambda nb: setattr(nb.training, "precision", "fp32"))
    from cockpit.runs import vouch  # the one rule for which pilot vouches for a variant reads the task's revision

    monkeypatch.setattr(vouch, "task_revision", lambda entry, d: {"task_code": "edited since"})
    with pytest.raises(UsageError, match=f"task code changed since its latest passed pilot {pid}"):
        vet(nbm.load(camp), ["lr1e-4"], [0])


def test_an_override_is_recorded_as_a_decision_and_in_each_row(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    decisions: list[str] = []
    items, made = vet(nbm.load(camp), ["lr2e-4"], [0, 1], without_pilot="the box is rented for one hour only")
    decisions.extend(made)
    assert decisions and "without a passed pilot" in decisions[0]
    sr.record_decisions(camp, decisions)
    start = functools.partial(launch.new_run, starter=lambda rdir, **kw: 0)  # the rows, not the processes
    series = sr.Series(camp, items, starter=start)
    series.poll()
    nb = nbm.load(camp)
    assert any("rented for one hour" in d.text for d in nb.decisions)
    rows = [r for r in nb.runs if r.kind == "train"]
    assert rows and all("started without a passed pilot: the box is rented for one hour only" in r.notes for r in rows)


def test_a_configuration_that_diverged_is_not_repeated_silently(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    passed_pilot(camp)
    bad, _ = write_run(camp, kind="train", seed=0, status="diverged", reason="loss 40 above 4x its start")
    later, _ = write_run(
        camp, kind="train", seed=0, status="completed", reason="budget reached", overrides={"lr": 5e-5}
    )  # a later run with another setting: not what is repeated
    with pytest.raises(UsageError) as exc:
        vet(nbm.load(camp), ["lr1e-4"], [0])
    assert f"{bad} already ran exactly these settings and ended diverged (loss 40 above 4x its start)" in str(exc.value)
    items, _ = vet(nbm.load(camp), ["lr1e-4"], [0], again="a fixed data bug since")
    assert items[0].follows == bad and "a fixed data bug since" in items[0].notes


# --------------------------------------------------------------------------- every GPU of the box


def test_parallel_runs_get_gpus_of_their_own_and_share_only_when_peaks_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cockpit import gpus as gpus_
    from tests.fake_runs import gpu_stack

    camp = make_campaign(tmp_path)
    write_run(camp, stack=gpu_stack(total_mib=81_920), gates=standard_gates(50_000, 60_000, 600))
    monkeypatch.setenv("COCKPIT_FAKE_GPUS", "4x81920")
    box = gpus_.visible()
    assert len(box) == 4
    notes, per_gpu = sr.fit_parallel(camp, ["lr1e-4"], 4, 1, box)
    assert per_gpu == 1 and "each run on GPUs of its own" in notes[0]
    with pytest.raises(UsageError, match="put 2 runs on one GPU, needing about 121,200 MiB"):
        sr.fit_parallel(camp, ["lr1e-4"], 8, 1, box)  # 2 x (60,000 + 600) > 81,920
    small = make_campaign(tmp_path, "small")
    write_run(small, stack=gpu_stack(total_mib=81_920), gates=standard_gates(20_000, 30_000, 600))
    notes, per_gpu = sr.fit_parallel(small, ["lr1e-4"], 8, 1, box)
    assert per_gpu == 2 and "2 runs per GPU" in notes[0]

    envs: list[str] = []

    def fake(campaign: Path, variant: str, seed: int, **kw: object) -> tuple[str, Path]:
        envs.append((kw.get("env") or {}).get("CUDA_VISIBLE_DEVICES", ""))  # type: ignore[union-attr]
        return launch.new_run(campaign, variant, seed, starter=lambda rdir, **k: 0, **kw)  # type: ignore[arg-type]

    items, _ = sr.plan(nbm.load(camp), ["lr1e-4", "lr5e-5"], [0, 1, 2])
    series = sr.Series(camp, items, parallel=4, starter=fake, placement=gpus_.Placement(box, 1))
    series.poll()
    assert sorted(envs) == ["0", "1", "2", "3"]  # four runs, four GPUs, none shared
    assert len(series.pending) == 2  # the rest wait for a GPU


def test_the_plan_counts_gpus(tmp_path: Path) -> None:
    from cockpit import plan as pl

    camp = make_campaign(tmp_path, updates=20_000)
    write_run(
        camp, stack=cpu_stack(), gates=standard_gates(None, None, step_s=5.0), steps={"update_second": 5.0}
    )  # 20,000 x 5 s: about 28 h per run
    one = pl.build(nbm.load(camp), days=(3,), seeds=3, gpus=1)
    four = pl.build(nbm.load(camp), days=(3,), seeds=3, gpus=4)
    assert len(one.packages[0].fits) == 2 and len(four.packages[0].fits) == 8
    assert "4 runs side by side on 4 GPUs" in "\n".join(pl.render(four))


def test_compare_says_what_pilot_all_and_the_guard_say_of_a_shared_pilot(tmp_path: Path) -> None:
    """Issue 36: right after `pilot --all` said the learning-rate variants share the reference's pilot, compare said
    they had no passed pilot. Compare asks the same rule (runs.pilot_for), in the CLI and the TUI."""
    import io

    from rich.console import Console

    from cockpit import compare
    from cockpit.tui.comparetables import memory_parts

    camp = make_campaign(tmp_path)
    rid = passed_pilot(camp)
    nb = nbm.load(camp)
    data = compare.summarize(nb)
    for vid in ("lr5e-5", "lr2e-4"):
        assert runs.pilot_for(nb, runs.campaign_runs(camp), vid)[0] is not None  # what the guard asks
        assert data["memory"][vid]["shared_run"] == rid and data["memory"][vid]["shared_variant"] == "lr1e-4"
    assert data["memory"]["bf16"]["shared_run"] is None
    out = io.StringIO()
    compare.render(data, Console(file=out, width=200))
    text = out.getvalue()
    assert f"lr5e-5, lr2e-4: share lr1e-4's passed pilot {rid}" in text
    said = [ln for ln in text.splitlines() if ln.startswith("no passed pilot (not in the table)")]
    assert all("lr5e-5" not in ln and "lr2e-4" not in ln for ln in said)
    tui = io.StringIO()
    Console(file=tui, width=200).print(*memory_parts(data))
    assert f"lr5e-5, lr2e-4: share lr1e-4's passed pilot {rid}" in tui.getvalue()
