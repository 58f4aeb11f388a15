"""A variant's effective settings: one accessor per setting, made once from the notebook, over the flat mapping the
task's functions still receive."""

from __future__ import annotations

from pathlib import Path

from cockpit import notebook
from cockpit.notebook import Settings
from cockpit.pilot.context import Context
from cockpit.pilot.phases.steps import base_inputs
from cockpit.pilot.trainer import Trainer
from tests.gates.test_phases import PARAMS, classifier


def test_defaults_are_spelled_once() -> None:
    s = Settings({"microbatch": 4, "accumulation": None, "precision": None, "eval_microbatch": 0, "updates": None})
    assert (s.microbatch, s.accumulation, s.eval_microbatch, s.precision, s.updates) == (4, 1, 4, "fp32", None)
    assert (s.data_replicas, s.model_parallel, s.gpus, s.per_update, s.grad_clip) == (1, 1, 1, 4, 0.0)
    s = Settings({"microbatch": 2, "accumulation": 3, "data_replicas": 2, "model_parallel": 2, "precision": "bf16"})
    assert (s.accumulation, s.per_update, s.gpus, s.precision) == (3, 12, 4, "bf16")


def test_made_from_the_notebook_with_the_variants_overrides() -> None:
    nb = notebook.parse(notebook.template("fresh"))
    ref = nb.reference.id
    nb.reference.set["accumulation"] = 5
    s = Settings.of(nb, ref)
    assert s.accumulation == 5 and s.microbatch == nb.batch.microbatch and s.precision == nb.training.precision
    assert s.flat() == nb.params(ref)  # the task still receives the flat mapping, unchanged


def test_the_pilot_reads_its_settings(tmp_path: Path) -> None:
    params = {**PARAMS, "accumulation": 3, "precision": None}
    ctx = Context.in_memory(classifier(), params, rdir=tmp_path)
    assert base_inputs(ctx) == {"microbatch": PARAMS["microbatch"], "accumulation": 3, "precision": "fp32"}
    tr = Trainer(classifier(), params, 0)
    assert (tr.accumulation, tr.eval_microbatch, tr.precision) == (3, PARAMS["eval_microbatch"], "fp32")
    assert tr.params == params  # what the task's functions receive
