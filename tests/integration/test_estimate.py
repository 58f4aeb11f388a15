"""``cockpit estimate``: the pilot's phases traced on fake tensors, checked on the CPU with tiny models: the tests that
start processes or load models (the rest: tests/unit/test_estimate.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from cockpit import cli
from cockpit import notebook as nbm
from cockpit.errors import UsageError
from cockpit.estimate import campaign, trace
from tests.unit.test_estimate import HERE, SLICING, TINY, _campaign, _op_task

sys.path.insert(0, str(HERE))  # the estimator's example tasks
import gpt_task  # noqa: E402
import slicing_task  # noqa: E402


@pytest.mark.slow  # runs real training steps on the CPU
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fake_trace_agrees_with_a_real_cpu_run(precision: str) -> None:
    params = {**TINY, "microbatch": 4, "accumulation": 2, "precision": precision, "fused": True}
    fake = trace.run(gpt_task.task, params, gpu_semantics=False, fake=True)
    real = trace.run(gpt_task.task, params, gpu_semantics=False, fake=False)
    assert [p.name for p in fake.phases] == list(trace.PHASES)
    assert [p.name for p in real.phases] == list(trace.PHASES)
    for f, r in zip(fake.phases, real.phases, strict=True):
        # the same storages by the same counter; a few zero-dimensional tensors (one 512 B block each) differ
        scalars = 32 * 512
        assert abs(f.peak_allocated - r.peak_allocated) <= 0.01 * r.peak_allocated + scalars, (f, r)
        assert abs(f.resident - r.resident) <= 0.01 * r.resident + scalars, (f, r)
    assert not real.invented and fake.invented  # only the fake trace had to answer float(loss)
    assert all(w.startswith("pilot/") for w in fake.invented), fake.invented  # the trainer's reads, not the model's
    # the second update holds the optimizer state the first one allocated: its peak is higher
    assert fake.phase("update_second").peak_allocated > fake.phase("forward").peak_allocated


@pytest.mark.slow  # runs real training steps on the CPU
def test_a_sliced_collate_agrees_with_torchs_own_measurement() -> None:
    """Issue 38: the collate returns ``labels = t[:, 1:]`` and the model calls ``targets.view(-1)``. The estimate
    traces it with the batch as the GPU holds it (each slice copied contiguous) and must agree, phase by phase,
    with the device's batch measured for real: the same model fed contiguous copies, run on real CPU tensors and
    measured by torch's profiler (c10's CPU allocator), not by the estimate's counter."""
    from cockpit.estimate.measure import measure

    params = {**SLICING, "microbatch": 8, "accumulation": 2, "precision": "fp32"}
    estimated = trace.run(slicing_task.task, params, gpu_semantics=True)
    measured = measure(slicing_task.task, {**params, "contiguous": True})
    assert set(measured.peaks) == set(trace.PHASES)
    for p in estimated.phases:
        ratio = p.peak_bytes / measured.peaks[p.name]
        assert 0.95 <= ratio <= 1.05, (p.name, p.peak_bytes, measured.peaks[p.name])
    assert estimated.phase("update_second").peak_bytes > estimated.phase("forward").peak_bytes  # AdamW's state


@pytest.mark.slow  # seconds: a model load or a fresh process
def test_phases_cover_build_state_and_eval() -> None:
    params = {**TINY, "microbatch": 4, "accumulation": 1, "precision": "fp32"}
    t = trace.run(gpt_task.task, params)
    # after the first update: float32 parameters plus AdamW's two moments (gradients set to None)
    assert t.phase("update_first").resident >= 3 * 4 * t.parameters
    # validation runs under no_grad: it holds no graph, so it peaks below the training step
    assert t.phase("validation").peak_allocated < t.phase("update_second").peak_allocated
    assert "flash" not in t.kernels and t.kernels["efficient"] > 0  # float32 attention: the memory-efficient kernel


@pytest.mark.slow  # runs real training steps on the CPU
def test_fp16_scaler_takes_its_step() -> None:
    """Under fp16 the grad scaler reads found_inf from a tensor: answered 0, so the optimizer step (and its state)
    happens as on a healthy run; every other value read is answered 1 and said."""
    params = {**TINY, "microbatch": 4, "accumulation": 1, "precision": "fp16"}
    t = trace.run(gpt_task.task, params)
    assert t.phase("update_first").resident >= 3 * 4 * t.parameters  # parameters and AdamW's two moments
    assert t.invented.get("amp/grad_scaler.py", 0) > 0


@pytest.mark.slow  # runs real training steps on the CPU
def test_default_adamw_runs_foreach_as_on_cuda() -> None:
    """Left at foreach=None, AdamW takes its single-tensor path on the CPU but foreach on CUDA: a temporary as large
    as every parameter at once (the square root of the second moments) during the step."""
    import dataclasses

    task = dataclasses.replace(gpt_task.task, optimizer=None)  # Cockpit's AdamW from [training]
    params = {**TINY, "microbatch": 4, "accumulation": 1, "precision": "fp32"}
    on_gpu = trace.run(task, params, gpu_semantics=True)
    on_cpu = trace.run(task, params, gpu_semantics=False)
    assert any("foreach" in n for n in on_gpu.notes), on_gpu.notes
    # update_first is the optimizer step alone here (one microbatch): foreach holds sqrt(v) of every parameter at
    # once, the single-tensor path two temporaries of one parameter (the largest: the 256 x 32 embedding)
    foreach = 4 * on_gpu.parameters
    single = 2 * 4 * TINY["vocab"] * TINY["d"]
    grown = on_gpu.phase("update_first").peak_allocated - on_cpu.phase("update_first").peak_allocated
    assert foreach - single <= grown <= foreach, (grown, foreach, single)


@pytest.mark.slow  # runs real training steps on the CPU
def test_cli_estimate_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "estimate"  # the estimate is saved beside the notebook: never into the repository
    shutil.copytree(HERE, folder, ignore=shutil.ignore_patterns("estimates", "__pycache__"))
    rc = cli.main(["estimate", str(folder), "--no-table", "--json", "--gpu", "L4", "80"])
    out = capsys.readouterr().out
    assert rc == 0
    e = json.loads(out)
    assert [p["name"] for p in e["phases"]] == list(trace.PHASES)
    assert [f["gpu"] for f in e["fits"]] == ["L4", "80 GB"]
    assert e["peak_allocated_mib"] == max(p["allocated_mib"] for p in e["phases"])
    assert all(p["nvml_mib"] > p["reserved_mib"] >= p["allocated_mib"] for p in e["phases"])
    assert any("attention: flash" in m for m in e["modelled"])
    # the same phases traced with the CPU's semantics, beside: bf16 cross_entropy holds more on the CPU
    assert all(p["cpu_allocated_mib"] is not None for p in e["phases"])
    assert e["phases"][0]["cpu_allocated_mib"] > e["phases"][0]["allocated_mib"]
    assert (folder / "estimates" / "ref.json").is_file() and not (HERE / "estimates").exists()


@torch.library.custom_op("cockpit_estimate_test::cuda_only", mutates_args=())
def cuda_only(x: torch.Tensor) -> torch.Tensor:
    """A custom op that runs nowhere here (a CUDA-only kernel on a CPU box)."""
    raise RuntimeError("no kernel for CPU")


@pytest.mark.slow  # seconds: a model load or a fresh process
def test_an_op_that_runs_nowhere_is_refused_by_name(tmp_path: Path) -> None:
    from cockpit.estimate.counter import Unfakeable
    from cockpit.pilot.usercode import UserCodeError

    with pytest.raises(UserCodeError) as got:
        trace.run(_op_task(cuda_only), {"microbatch": 4, "lr": 1e-3, "precision": "fp32"})
    assert isinstance(got.value.exc, Unfakeable)
    assert "cockpit_estimate_test.cuda_only" in str(got.value.exc) and "no kernel for CPU" in str(got.value.exc)
    nb = _campaign(
        tmp_path,
        "\n\n@torch.library.custom_op('cockpit_estimate_fixture::nowhere', mutates_args=())\n"
        "def nowhere(x: torch.Tensor) -> torch.Tensor:\n    raise RuntimeError('CUDA only')\n\n\n"
        "_forward = Block.forward\nBlock.forward = lambda self, x: nowhere(_forward(self, x))\n",
    )
    with pytest.raises(UsageError, match=r"nowhere.*cannot run on fake tensors.*nor on the CPU.*register_fake"):
        campaign.estimate(nb, second=False)


@pytest.mark.slow  # traces a campaign three times
def test_the_table_has_both_axes(tmp_path: Path) -> None:
    """Issue 38: the largest microbatch at the campaign's length and the longest length at its microbatch, per GPU
    size, the length traced at half the campaign's (the task's block), every bound a number."""
    from cockpit import notebook as nbm
    from cockpit.estimate import report

    folder = tmp_path / "estimate"
    shutil.copytree(HERE, folder, ignore=shutil.ignore_patterns("estimates", "__pycache__"))
    e = campaign.estimate(nbm.load(folder), compare_cpu=False)
    assert (e.length, e.second_length, e.length_param) == (64, 32, "block")
    assert all(f.longest_length >= 64 and f.largest_microbatch >= 8 for f in e.fits)  # a tiny model fits everywhere
    assert e.fits[0].longest_length <= e.fits[-1].longest_length
    table = "\n".join(report.render(e)).split("Fits (", 1)[1]
    assert "longest length (block) at microbatch 8" in table and " any" not in table


@pytest.mark.slow  # traces a campaign twice
def test_a_sliced_collate_is_estimated_on_the_gpus_semantics_and_the_cpu_column_says_why_it_is_left_out(
    tmp_path: Path,
) -> None:
    """Issue 38: ``labels = t[:, 1:]`` with ``targets.view(-1)`` runs on a GPU (the copy makes the slice
    contiguous) and fails on the CPU (no copy): the estimate is the GPU's, and only the CPU column is left out."""
    from tests.unit.test_estimate import _campaign

    nb = _campaign(tmp_path, "")
    toml = nb.path
    toml.write_text(toml.read_text().replace("fused = true\n", "fused = true\nsliced = true\n", 1))
    e = campaign.estimate(nbm.load(nb.directory), second=False, compare_cpu=True)
    assert all(r.cpu_allocated_mib is None for r in e.phases)
    left_out = [m for m in e.not_modelled if m.startswith("the CPU-semantics column")]
    assert left_out and "Cannot view a tensor" in left_out[0], e.not_modelled
    assert e.peak_allocated_mib > 0
