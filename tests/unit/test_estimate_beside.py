"""The saved estimate beside the measured pilot (issue 28, item 3): the sheet, and through it the notebook's
[selection] that the TUI shows, carry the prediction and, once a pilot measured a GPU, the measured / predicted
ratio. An estimate never sizes anything itself."""

from __future__ import annotations

from pathlib import Path

from cockpit import estimates
from cockpit import notebook as nbm
from cockpit import sheet as sh
from tests.fake_runs import cpu_stack, gpu_stack, make_campaign, standard_gates, write_run

SAVED = {
    "variant": "lr1e-4",
    "phases": [
        {"name": "forward", "allocated_mib": 6536.0, "reserved_mib": 6594.0, "nvml_mib": 7976.0},
        {"name": "update_second", "allocated_mib": 8271.0, "reserved_mib": 9740.0, "nvml_mib": 11122.0},
    ],
}


def test_a_gpu_pilot_shows_the_estimate_and_the_ratios(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    estimates.save(camp, "lr1e-4", SAVED, "2026-12-02")
    write_run(camp, stack=gpu_stack(), gates=standard_gates(9000, 10000, 600))  # peak reserved 10,000 MiB
    s = sh.build(nbm.load(camp))
    line = next(x for x in sh.render(s) if "estimate" in x)
    assert "peak 8,271 MiB allocated in update_second, 9,740 MiB reserved" in line
    assert "allocated 9,000 MiB (1.09x)" in line and "reserved 10,000 MiB (1.03x)" in line
    assert s.estimate in sh.selection_of(s).notes  # the notebook's [selection], which the TUI shows
    assert s.recommendation and "estimate" not in s.recommendation  # the sizing comes from the measurement


def test_a_cpu_pilot_says_there_is_nothing_to_compare_yet(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    estimates.save(camp, "lr1e-4", SAVED, "2026-12-02")
    write_run(camp, stack=cpu_stack(), gates=standard_gates(None, None))
    s = sh.build(nbm.load(camp))
    assert "no GPU measurement of this variant yet" in s.estimate and "8,271 MiB" in s.estimate


def test_without_a_saved_estimate_the_sheet_says_nothing_of_one(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    write_run(camp, stack=gpu_stack(), gates=standard_gates(9000, 10000, 600))
    (camp / "estimates").mkdir()
    (camp / "estimates" / "lr1e-4.json").write_text("not json")  # a file Cockpit did not write: ignored
    s = sh.build(nbm.load(camp))
    assert s.estimate == "" and not any("`cockpit estimate`" in x for x in sh.render(s))


def test_the_plan_shows_the_estimate_beside_the_gpu_pilot(tmp_path: Path) -> None:
    from cockpit import plan as pl

    camp = make_campaign(tmp_path)
    estimates.save(camp, "lr1e-4", SAVED, "2026-12-02")
    write_run(camp, stack=gpu_stack(), gates=standard_gates(9000, 10000, 600), steps={"update_second": 0.5})
    lines = pl.render(pl.build(nbm.load(camp)))
    memory = [x for x in lines if x.startswith("- memory, lr1e-4: estimate")]
    assert len(memory) == 1 and "allocated 9,000 MiB (1.09x)" in memory[0]
