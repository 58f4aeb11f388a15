"""``cockpit estimate`` per strategy (issue 38): a DDP rank against DDP run for real (two ranks under gloo on the
CPU, each measured by torch's profiler), activation checkpointing against a real CPU run, and what is not
modelled (FSDP, torch.compile) said by name in the estimate."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cockpit import notebook as nbm
from cockpit.estimate import campaign, report, trace
from cockpit.estimate.measure import measure
from tests.estimate import ddp_ranks
from tests.unit.test_estimate import HERE

CHECKED = ddp_ranks.CHECKED


@pytest.mark.slow  # spawns two processes that train for real under gloo, then traces each rank
def test_a_ddp_rank_agrees_with_ddp_run_under_gloo() -> None:
    params = ddp_ranks.PARAMS
    real = ddp_ranks.measured(params)
    fake = ddp_ranks.estimated(params)
    one = ddp_ranks.estimated(params, 1, "one GPU")[0]
    buckets = 4 * trace.run(ddp_ranks.task(), params, gpu_semantics=False).trainable  # float32 gradients, again
    assert sorted(real) == sorted(fake) == [0, 1]
    for rank in real:
        for phase in CHECKED:
            ratio = fake[rank][phase] / real[rank][phase]
            assert 0.95 <= ratio <= 1.05, (rank, phase, fake[rank][phase], real[rank][phase])
            # DDP's buckets are there for real: the one-GPU figure is short of the rank by their bytes
            assert real[rank][phase] - one[phase] >= 0.95 * buckets, (rank, phase, real[rank][phase], one[phase])


@pytest.mark.slow  # real training steps on the CPU, twice
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_activation_checkpointing_agrees_with_a_real_cpu_run(precision: str) -> None:
    """The model checkpoints each block (torch.utils.checkpoint, use_reentrant=False), under CPU autocast for fp16
    with the pilot's grad scaler: the recomputation inside backward is traced like any other op."""
    params = {**ddp_ranks.PARAMS, "layers": 3, "block": 64, "min_length": 64, "precision": precision}
    on = {**params, "activation_checkpointing": True}
    fake = trace.run(ddp_ranks.task(), on, gpu_semantics=False)
    real = measure(ddp_ranks.task(), on)
    for phase in CHECKED:
        ratio = fake.phase(phase).peak_bytes / real.peaks[phase]
        assert 0.95 <= ratio <= 1.05, (phase, fake.phase(phase).peak_bytes, real.peaks[phase])
    off = trace.run(ddp_ranks.task(), params, gpu_semantics=False)
    assert fake.phase("forward").peak_bytes < 0.6 * off.phase("forward").peak_bytes  # it checkpointed


def _notebook(tmp_path: Path, batch: str) -> nbm.Notebook:
    folder = tmp_path / "c"
    shutil.copytree(HERE, folder, ignore=shutil.ignore_patterns("estimates", "__pycache__"))
    toml = folder / "campaign.toml"
    toml.write_text(toml.read_text().replace("accumulation = 2\n", f"accumulation = 2\n{batch}\n"))
    return nbm.load(folder)


@pytest.mark.slow  # traces a campaign twice
def test_a_ddp_campaign_is_estimated_per_rank(tmp_path: Path) -> None:
    one = campaign.estimate(_notebook(tmp_path / "one", ""), second=False, compare_cpu=False)
    ddp = campaign.estimate(_notebook(tmp_path / "ddp", "data_replicas = 2"), second=False, compare_cpu=False)
    text = "\n".join(report.render(ddp))
    assert "per rank of DDP over 2 GPUs" in text
    assert any("DDP's gradient buckets" in m for m in ddp.modelled), ddp.modelled
    grown = ddp.phases[0].allocated_mib - one.phases[0].allocated_mib  # forward: the buckets, float32 gradients
    assert grown >= 0.99 * 4 * ddp.trainable / report.MIB, (grown, ddp.trainable)
    assert "DDP" not in "\n".join(report.render(one))


@pytest.mark.slow  # traces a campaign
def test_fsdp_and_torch_compile_are_said_not_modelled(tmp_path: Path) -> None:
    e = campaign.estimate(_notebook(tmp_path, "data_replicas = 2\nmodel_parallel = 2"), second=False, compare_cpu=False)
    text = "\n".join(report.render(e))
    assert e.strategy == "FSDP" and e.gpus == 4
    assert "FSDP over 4 GPUs: not modelled, measure with cockpit pilot" in text
    assert "one GPU's figures (FSDP over 4 GPUs is not modelled)" in text
    assert "torch.compile" in text.split("Not modelled:")[1]
    assert not any("DDP" in m for m in e.modelled)
