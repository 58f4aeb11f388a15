"""The machine as it is: a busy CPU marks the phases it timed, GPU memory held by other processes is named and
kept out of the sizing, and the disk a series needs is measured against what is free (issue 18).

Load, NVML processes and free space are faked through the environment variables ``cockpit.machine`` reads, so
every test runs the product's own code paths on a CPU-only box."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from cockpit import machine
from cockpit import notebook as nbm
from cockpit import plan as pl
from cockpit import series as sr
from cockpit import sheet as sh
from cockpit.errors import UsageError
from cockpit.gatetable import busy_words
from cockpit.pilot.context import Context
from cockpit.pilot.phases import PHASES
from cockpit.pilot.pilot import run_phase
from cockpit.pilot.training import DiskFullSoon
from tests.fake_runs import cpu_stack, gpu_stack, make_campaign, standard_gates, write_run
from tests.gates.test_phases import PARAMS, classifier

MIB = 2**20


# --------------------------------------------------------------------------- CPUs


def test_threads_follow_the_cpus_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("COCKPIT_FAKE_OTHERS_CPU", "0")  # an idle machine, whatever this one is doing
    from cockpit.pilot import threads

    monkeypatch.setattr(threads, "available_cpus", lambda: 1.0)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        said = threads.fit_torch_threads()
        assert torch.get_num_threads() == 1 and "4 -> 1" in said and "not the machine's count" in said
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert "kept" in threads.fit_torch_threads()
    finally:
        torch.set_num_threads(before)
    assert machine.available_cpus() >= 1


def test_threads_leave_the_cpus_other_processes_keep_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a load of 4-8 on 2 CPUs, torch's default threads made the demo pilot 4-6x slower than one thread."""
    import torch

    from cockpit.pilot import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "available_cpus", lambda: 2.0)
    monkeypatch.setenv("COCKPIT_FAKE_OTHERS_CPU", "1.9")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        said = threads.fit_torch_threads()
        assert torch.get_num_threads() == 1, said
        assert "2 -> 1" in said and "other processes kept 1.9 of 2 CPUs busy" in said
        monkeypatch.setenv("COCKPIT_FAKE_OTHERS_CPU", "0.1")
        assert "torch threads 1 -> 2" in threads.fit_torch_threads() and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert [threads.threads_for(c, o) for c, o in ((2, 6.0), (2, 0.4), (16, 3.2), (1, 0), (8, 7.6))] == [1, 2, 13, 1, 1]


def test_a_phase_timed_on_a_busy_machine_is_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COCKPIT_FAKE_OTHERS_CPU", "1.9")
    monkeypatch.setattr(machine, "available_cpus", lambda: 2.0)
    ctx = Context.in_memory(classifier(), PARAMS)
    g, ended = run_phase(ctx, PHASES[0])
    assert ended is None
    assert g.extra["machine"]["busy"] and g.extra["machine"]["others_cpus"] == 1.9
    load = g.extra["machine"]["load1"]
    # the 1-minute load counts runnable processes, not CPUs: it is named as a load ("8.7 of 2 CPUs" read as CPUs)
    assert g.extra["busy"] == f"load {load:.1f} on 2 CPUs"
    gates = [
        {"phase": p, "verdict": "pass", "busy": g.extra["busy"], "machine": g.extra["machine"]} for p in ("a", "b")
    ]
    assert busy_words(gates) == f"* load {load:.1f} on 2 CPUs during all 2 phases: times from a busy machine"
    assert busy_words([*gates, {"phase": "c", "verdict": "pass"}]).endswith("during a, b: times from a busy machine")
    no_load = {"busy": True, "cpus": 2.0, "others_cpus": 1.9, "load1": None}
    assert machine.busy_words(no_load) == "other processes used 1.9 of 2 CPUs"


def test_an_idle_machine_is_not_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COCKPIT_FAKE_OTHERS_CPU", "0.1")
    monkeypatch.setattr(machine, "available_cpus", lambda: 2.0)
    g, _ = run_phase(Context.in_memory(classifier(), PARAMS), PHASES[0])
    assert not g.extra["machine"]["busy"] and "busy" not in g.extra


def _busy_pilot(camp: Path, busy: str) -> str:
    gates = standard_gates(None, None)
    for g in gates:
        if g["phase"] == "update_second":
            g["busy"] = busy
            g["step_time"] = {"median": 0.5, "min": 0.4, "max": 1.7, "n": 5}
    rid, _ = write_run(camp, stack=cpu_stack(), gates=gates)
    return rid


def test_the_plan_and_compare_say_a_time_came_from_a_busy_machine(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    _busy_pilot(camp, "other processes kept 1.9 of 2 CPUs busy")
    text = "\n".join(pl.render(pl.build(nbm.load(camp), days=(3,))))
    assert "timed on a busy machine (other processes kept 1.9 of 2 CPUs busy)" in text
    assert "pilot again when the box is idle" in text
    mem_row = {"step_time_s": 0.5, "step_min_s": 0.4, "step_max_s": 1.7, "step_n": 5, "busy": "x"}
    ref = {"step_time_s": 0.2, "step_min_s": 0.19, "step_max_s": 0.21, "step_n": 5, "busy": ""}
    compare_render = importlib.import_module("cockpit.compare.render")
    cell = compare_render._step_cell({"lr5e-5": mem_row, "lr1e-4": ref}, "lr5e-5", "lr1e-4")
    assert "busy machine: no ratio" in cell and "x" not in cell.split("]")[-1].replace("(busy machine: no ratio)", "")


# --------------------------------------------------------------------------- GPU memory held by others


def test_fake_gpu_processes_are_named_and_own_pids_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COCKPIT_FAKE_GPU_PROCESSES", "0:4242:jupyter-kernel:6000,1:77:old-run:100")
    others = machine.gpu_others(own_pids={77})
    assert others == [{"gpu": 0, "pid": 4242, "name": "jupyter-kernel", "used": 6000 * MIB}]
    assert machine.describe_others(others) == "GPU 0: pid 4242 jupyter-kernel 6,000 MiB"


def test_the_sheet_sizes_from_the_runs_own_memory_and_states_both(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    gates = standard_gates(20_000, 30_000, nvml_extra_mib=6_500)  # NVML = own reserved + 500 context + 6000 others
    for g in gates:
        g["machine"] = {"busy": False, "gpu_others": {"0": 6_000 * MIB}}
    write_run(camp, stack=gpu_stack(), gates=gates)
    s = sh.build(nbm.load(camp))
    assert s.context_mib == pytest.approx(500, abs=1) and s.others_mib == pytest.approx(6_000)
    text = "\n".join(sh.render(s))
    assert "minus 6,000 MiB held by other processes" in text and "this run's own memory" in text
    assert "other processes held 6,000 MiB on that GPU" in text


# --------------------------------------------------------------------------- disk


def _sized_pilot(camp: Path, ckpt_mib: float, export_mib: float) -> None:
    gates = standard_gates(None, None)
    for g in gates:
        if g["phase"] == "save":
            g["bytes"] = int(ckpt_mib * MIB)
        if g["phase"] == "export":
            g["bytes"] = int(export_mib * MIB)
        if g["phase"] == "update_second":
            g["step_time"] = {"median": 0.5, "min": 0.5, "max": 0.5, "n": 5}
    write_run(camp, stack=cpu_stack(), gates=gates)


def test_the_plan_counts_the_disk_a_series_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    camp = make_campaign(tmp_path)
    _sized_pilot(camp, 1000, 300)
    monkeypatch.setenv("COCKPIT_FAKE_FREE_MIB", str(100_000))
    p = pl.build(nbm.load(camp), days=(3,), seeds=3)
    assert p.disk is not None and p.disk.runs == 9
    # 1 run at once x (2 kept + 1 being written) x 1000 + 9 x (1000 + 300) + one archive of 300
    assert p.disk.need == (3 * 1000 + 9 * 1300 + 300) * MIB and p.disk.fits
    text = "\n".join(pl.render(p))
    assert "Disk for the largest package's 9 runs: 14.6 GiB needed of 97.7 GiB free" in text


def test_a_series_the_disk_cannot_hold_is_refused_naming_what_would_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    camp = make_campaign(tmp_path)
    _sized_pilot(camp, 1000, 300)
    nb = nbm.load(camp)
    monkeypatch.setenv("COCKPIT_FAKE_FREE_MIB", "5000")
    items, _ = sr.plan(nb, ["lr1e-4"], [0, 1, 2])
    with pytest.raises(UsageError) as exc:
        sr.guard(nb, items, parallel=1)
    msg = str(exc.value)
    assert "the series does not start" in msg and "the disk: 7.0 GiB needed of 4.9 GiB free" in msg
    assert "[checkpoints] keep = 1 needs 6.1 GiB" in msg and "trainable_only = true" in msg
    assert "1 run fits as set" in msg
    monkeypatch.setenv("COCKPIT_FAKE_FREE_MIB", "8000")
    sr.guard(nb, items, parallel=1)  # fits: no refusal


def test_disk_full_soon_stops_a_run_cleanly_and_it_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cockpit.pilot.training import TrainingRun

    run = TrainingRun.__new__(TrainingRun)
    run.rdir = tmp_path / "runs" / "r0001"
    run.rdir.mkdir(parents=True)
    run.last_checkpoint_bytes = 0
    run.disk_full = False
    run.total = 200
    monkeypatch.setattr(TrainingRun, "_step", lambda self: 50)
    import torch

    state: dict[str, Any] = {"model": {"w": torch.zeros(2**20)}}  # 4 MiB
    monkeypatch.setenv("COCKPIT_FAKE_FREE_MIB", "5")
    with pytest.raises(
        DiskFullSoon,
        match="disk full soon: 5 MiB free .* a checkpoint takes 4 MiB; stopped cleanly "
        "after 50 of 200 updates \\(no checkpoint yet to resume from",
    ):
        run.room_for(state)
    assert run.disk_full
    monkeypatch.setenv("COCKPIT_FAKE_FREE_MIB", "9")
    run.room_for(state)  # two checkpoints fit: no stop
