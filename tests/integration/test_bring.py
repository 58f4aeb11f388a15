"""Bring your code: the Hugging Face, PEFT and Lightning helpers, TrainingArguments, adapters, in this process: the
tests that start processes or load models (the rest: tests/gates/test_bring.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from cockpit.pilot import checkpoint as ck
from cockpit.pilot.context import Context
from cockpit.pilot.gate import Gate
from cockpit.pilot.phases import PHASES
from cockpit.pilot.pilot import run_phase
from cockpit.pilot.task import Task
from tests.gates import test_bring as fast
from tests.gates.test_bring import PARAMS, ROOT, gpt2, pairs

# the fixtures the fast tests share
tokenizer = fast.tokenizer


def lora(**kw: Any) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True, task_type="CAUSAL_LM", **kw
    )


def through(task: Task, last: str, tmp: Path, params: dict[str, Any] | None = None) -> tuple[Context, dict[str, Gate]]:
    ctx = Context.in_memory(task, {**PARAMS, **(params or {})}, rdir=tmp)
    gates: dict[str, Gate] = {}
    for phase in PHASES:
        gates[phase.name], ended = run_phase(ctx, phase)
        if ended is not None or phase.name == last:
            break
    return ctx, gates


def check(g: Gate, name: str) -> dict[str, Any]:
    return next(c for c in g.checks if c["name"] == name)


@pytest.mark.slow  # seconds: a model load or a fresh process
def test_causal_lm_with_lora_passes_the_update_gates_and_generates(tokenizer: Any, tmp_path: Path) -> None:
    """LoRA's A gets an exactly zero gradient while B is zero: not a failure at the first step, and it moves later."""
    from cockpit.integrations import hf

    task = hf.causal_lm(gpt2(tokenizer), tokenizer, pairs(), adapter=lora(), max_length=16)
    ctx, gates = through(task, "update_second", tmp_path, {"weight_decay": 0.0})
    first, second = gates["update_first"], gates["update_second"]
    assert first.verdict.value == "pass", first.checks
    assert "exactly zero gradient" in check(first, "targeted parameters changed")["detail"]
    assert "lora_A" in check(first, "targeted parameters changed")["detail"]
    assert check(first, "base model unchanged")["ok"]
    assert check(second, "zero-gradient parameters moved since")["ok"], second.checks
    st = first.extra["optimizer_state"]
    assert st["trainable_values"] < st["parameter_values"] / 5 and st["adapter"].startswith("PEFT adapter default")
    texts = ctx.trainer.generated(ctx.trainer.collate(list(ctx.trainer.splits["val"][:3])))
    assert isinstance(texts, list) and len(texts) == 3 and all(isinstance(t, str) for t in texts)


@pytest.mark.slow  # seconds: a model load or a fresh process
def test_base_weights_left_trainable_fail_the_update_gate(tokenizer: Any, tmp_path: Path) -> None:
    from peft import get_peft_model
    from transformers import GPT2LMHeadModel

    from cockpit.integrations import hf

    def model(params: dict[str, Any]) -> Any:
        m = get_peft_model(GPT2LMHeadModel(gpt2(tokenizer)), lora())
        for p in m.parameters():
            p.requires_grad = True  # "make sure everything trains": the base trains too
        return m

    _, gates = through(hf.causal_lm(model, tokenizer, pairs(), max_length=16), "update_first", tmp_path)
    c = check(gates["update_first"], "base model unchanged")
    assert gates["update_first"].verdict.value == "fail" and not c["ok"]
    assert "parameters of the base model under the PEFT adapter changed" in c["detail"]
    assert "require grad" in c["detail"] and "get_peft_model" in c["detail"]


@pytest.mark.slow  # seconds: a model load or a fresh process
def test_the_adapter_is_exported_alone_and_reloads_only_over_its_base(tokenizer: Any, tmp_path: Path) -> None:
    from cockpit.integrations import hf

    task = hf.causal_lm(gpt2(tokenizer), tokenizer, pairs(), adapter=lora(), max_length=16)
    ctx, _ = through(task, "update_second", tmp_path)
    tr = ctx.trainer
    controls = list(tr.splits["val"][:3])
    manifest = ck.export_trained(tr, tmp_path / "artifact", {"run": "r0001"}, controls)
    state = torch.load(tmp_path / "artifact" / "model.pt", weights_only=True)
    assert manifest["weights"] == "adapter" and state and all("lora_" in k for k in state)
    # every frozen tensor is in the base's identity (tied weights under each of their names)
    assert manifest["base"]["values"] + manifest["adapter"]["values"] >= sum(p.numel() for p in tr.model.parameters())
    assert manifest["adapter"]["values"] == sum(p.numel() for p in tr.model.parameters() if p.requires_grad)
    recorded = torch.load(tmp_path / "artifact" / "control.pt", weights_only=True)
    assert len(recorded["generated"]) == 3

    from cockpit.pilot.trainer import Trainer

    fresh = Trainer(task, dict(ctx.params), 0, torch.device("cpu"), splits={"train": controls, "val": controls})
    fresh.load_data()
    fresh.build()
    ok, said = ck.load_exported(fresh, state, manifest)
    assert ok, said
    equal, detail = ck.compare_controls(fresh.control_outputs(controls), recorded, 3, exact=True)
    assert equal and "3 generated texts identical" in detail, detail

    other = Trainer(task, dict(ctx.params), 1, torch.device("cpu"), splits={"train": controls, "val": controls})
    other.load_data()
    other.build()  # another seed: another random base
    ok, said = ck.load_exported(other, state, manifest)
    assert not ok and "not the one the adapter was trained on" in said


@pytest.mark.slow  # trains through Lightning
def test_lightning_steps_logs_and_refusals() -> None:
    import lightning.pytorch as L
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from cockpit.integrations.lightning import LightningHelperError, lightning_task

    class Lit(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(3, 2)

        def training_step(self, batch: Any, i: int) -> Any:
            x, y = batch
            return {"loss": F.cross_entropy(self.net(x), y)}

        def validation_step(self, batch: Any, i: int) -> None:
            x, y = batch
            self.log("val_loss", F.cross_entropy(self.net(x), y) * 0 + 7.0)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Data(L.LightningDataModule):
        def setup(self, stage: str | None = None) -> None:
            g = torch.Generator().manual_seed(0)
            self.ds = TensorDataset(torch.randn(12, 3, generator=g), torch.randint(0, 2, (12,), generator=g))

        def train_dataloader(self) -> Any:
            return DataLoader(self.ds, batch_size=4)

        def val_dataloader(self) -> Any:
            return DataLoader(self.ds, batch_size=4)

    task = lightning_task(Lit, Data, kind="classification", label_names=["a", "b"])
    splits = task.datasets({})
    assert len(splits["train"]) == 12 and splits["train"][3]["id"] == "train-00003" and "test" not in splits
    batch = task.collate(list(splits["train"][:4]), {})
    assert set(batch) == {"inputs", "labels"}
    model = task.build_model({})
    assert task.loss is not None
    assert task.loss(model, batch)["loss"].requires_grad  # training_step, as written
    with torch.no_grad():
        assert float(task.loss(model, batch)) == 7.0  # validation_step's logged val_loss
    assert task.optimizer is not None and task.scheduler is not None
    opt = task.optimizer(model, {"microbatch": 4})
    assert "constant" in task.scheduler(opt, {"microbatch": 4}).description

    class Manual(Lit):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

    with pytest.raises(LightningHelperError, match="manual optimisation"):
        lightning_task(Manual, Data).build_model({})


@pytest.mark.slow
def test_example_task_files_need_no_path_setup() -> None:
    """A task file imports the modules beside it (campaigns/lightning/task.py imports model.py)."""
    code = (
        "from pathlib import Path\n"
        "from cockpit.pilot.task import load_task\n"
        "t = load_task('task.py:task', Path('campaigns/lightning'))\n"
        "print(type(t).__name__, t.kind, t.label_names)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[:2] == ["Task", "classification"]
