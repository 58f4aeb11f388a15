"""The probe on a corpus of training scripts shaped like the ones people run (tests/probe_scripts/), each
unmodified: run once without the probe and once under it (``--to-end``), the two must print and write the
same bytes and every verdict must be right; then each with one planted defect, which the probe must name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cockpit import cli, runs

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parents[1] / "probe_scripts"
PY = sys.executable
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def plain(script: str, out: Path, *args: str) -> str:
    done = subprocess.run(
        [PY, str(SCRIPTS / script), "--out", str(out), *args], env=ENV, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class Probed:
    def __init__(self, code: int, summary: dict[str, Any], run: runs.RunFiles):
        self.code, self.summary, self.run = code, summary, run
        self.gates = {g["phase"]: g for g in run.gates}

    @property
    def verdicts(self) -> dict[str, str]:
        return {p: g["verdict"] for p, g in self.gates.items()}

    def check(self, phase: str, name: str) -> dict[str, Any]:
        found = [c for c in (self.gates.get(phase) or {}).get("checks") or [] if c["name"] == name]
        assert found, (phase, name, self.summary, self.verdicts, self.log[-3000:])
        return found[0]

    @property
    def log(self) -> str:
        return (Path(self.summary["dir"]) / "output.log").read_text("utf-8", "replace")


def probe(
    campaign: Path,
    capsys: Any,
    script: str,
    out: Path,
    *args: str,
    steps: int = 3,
    how: tuple[str, ...] = ("--to-end",),
) -> Probed:
    os.environ["OMP_NUM_THREADS"] = "1"
    code = cli.main(
        [
            "probe",
            str(campaign),
            "--json",
            "--steps",
            str(steps),
            *how,
            "--",
            PY,
            str(SCRIPTS / script),
            "--out",
            str(out),
            *args,
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    run = runs.read_run(summary["dir"])
    assert run is not None
    return Probed(code, summary, run)


def same_run(campaign: Path, capsys: Any, tmp_path: Path, script: str, *args: str, steps: int = 3) -> Probed:
    """The script without the probe and under it: the same output lines, the same files byte for byte."""
    out = tmp_path / "out"  # the same path both times: a script may save its own arguments
    stdout = plain(script, out, *args)
    unprobed = files(out)
    out.rename(tmp_path / "plain")
    p = probe(campaign, capsys, script, out, *args, steps=steps)
    lines = [x for x in stdout.splitlines() if x.strip()]
    logged = p.log
    assert all(x in logged for x in lines), (lines, logged[-3000:], p.summary)
    assert unprobed and files(out) == unprobed
    return p


def test_nanogpt_style_accumulation_eval_then_save(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = same_run(campaign, capsys, tmp_path, "nanogpt_style.py")
    assert (p.code, p.summary["status"]) == (0, "passed"), (p.summary, p.verdicts)
    assert set(p.verdicts.values()) <= {"pass", "warn"} and "update_first" in p.verdicts, p.verdicts
    assert p.check("update_first", "targeted parameters changed")["ok"]  # every element of ln_f that moved is seen
    assert p.gates["update_first"]["inputs"]["microbatches"] == 4
    assert p.check("update_second", "gradients zeroed between updates")["ok"]
    assert p.check("validation", "training mode restored")["ok"]


@pytest.mark.parametrize(
    ("defect", "phase", "check", "words"),
    [
        ("no-zero-grad", "update_second", "gradients zeroed between updates", "never zeroed"),
        ("eval-left-on", "validation", "training mode restored", "ran in eval mode"),
    ],
)
def test_nanogpt_style_defects(campaign, tmp_path, monkeypatch, capsys, defect, phase, check, words):
    monkeypatch.chdir(tmp_path)
    p = probe(campaign, capsys, "nanogpt_style.py", tmp_path / "o", "--defect", defect)
    c = p.check(phase, check)
    assert not c["ok"] and words in c["detail"], c
    assert p.summary["status"] == "failed" and phase in p.summary["stop_reason"]


def test_nanogpt_style_resume_reseeds_its_batches_and_the_resume_row_says_so(campaign, tmp_path, monkeypatch, capsys):
    """The script re-seeds its batch sampler when it starts, as nanoGPT does: the resumed losses differ from the
    uninterrupted ones by design. The row fails by its rule, labels which loss is which, and says the optimizer's
    step and the learning rate came back, so the difference is the data order or the random state."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o"
    resume_cmd = f"{PY} {SCRIPTS / 'nanogpt_style.py'} --out {out} --init-from resume"
    p = probe(campaign, capsys, "nanogpt_style.py", out, how=("--resume", resume_cmd))
    c = p.check("resume", "next losses equal the uninterrupted run")
    assert not c["ok"] and "resumed" in c["detail"] and "uninterrupted" in c["detail"], c
    assert "with the step and learning rate restored" in c["detail"] and "data order" in c["detail"]
    assert p.check("resume", "step restored")["ok"] and p.check("resume", "checkpoint loaded")["ok"]


def test_word_lm_manual_sgd_whole_model_saves(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = same_run(campaign, capsys, tmp_path, "word_lm.py")
    assert (p.code, p.summary["status"]) == (0, "passed"), (p.summary, p.verdicts)
    assert set(p.verdicts.values()) <= {"pass", "warn"}, {k: v["checks"] for k, v in p.gates.items()}
    assert "hand-written update" in p.check("update_first", "update seen")["detail"]
    assert p.gates["forward"]["inputs"]["microbatch"] == 4 and p.gates["forward"]["inputs"]["batch_dim"] == 1
    assert p.check("update_second", "gradients zeroed between updates")["ok"]
    assert p.gates["validation"]["verdict"] == "pass" and p.gates["save"]["inputs"]["files"] == ["model.pt"]


def test_word_lm_without_zero_grad(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = probe(campaign, capsys, "word_lm.py", tmp_path / "o", "--defect", "no-zero-grad")
    c = p.check("update_second", "gradients zeroed between updates")
    assert not c["ok"] and "never zeroed" in c["detail"] and p.summary["status"] == "failed"


def test_lightning_automatic_optimization(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = same_run(campaign, capsys, tmp_path, "lightning_auto.py")
    assert (p.code, p.summary["status"]) == (0, "passed"), (p.summary, {k: v["checks"] for k, v in p.gates.items()})
    assert set(p.verdicts.values()) <= {"pass", "warn"}, {k: v["checks"] for k, v in p.gates.items()}
    assert p.gates["forward"]["inputs"]["module"] == "Model" and p.gates["update_first"]["inputs"]["optimizer"] == "SGD"
    assert p.gates["validation"]["verdict"] == "pass"


def test_lightning_layer_left_out_of_configure_optimizers(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = probe(campaign, capsys, "lightning_auto.py", tmp_path / "o", "--defect", "layer-left-out")
    c = p.check("update_first", "optimizer holds every parameter with a gradient")
    assert not c["ok"] and "layer1.weight" in c["detail"] and p.summary["status"] == "failed"


def test_lbfgs_closure(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = same_run(campaign, capsys, tmp_path, "lbfgs_fit.py")
    assert (p.code, p.summary["status"]) == (0, "passed"), (p.summary, {k: v["checks"] for k, v in p.gates.items()})
    assert set(p.verdicts.values()) <= {"pass", "warn"}, {k: v["checks"] for k, v in p.gates.items()}
    assert p.gates["update_first"]["inputs"]["optimizer"] == "LBFGS"


def test_lbfgs_closure_without_zero_grad(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = probe(campaign, capsys, "lbfgs_fit.py", tmp_path / "o", "--defect", "no-zero-grad")
    c = p.check("update_second", "gradients zeroed between updates")
    assert not c["ok"] and "never zeroed" in c["detail"] and p.summary["status"] == "failed"


def test_gan_two_optimizers(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = same_run(campaign, capsys, tmp_path, "gan.py")
    assert (p.code, p.summary["status"]) == (0, "passed"), (p.summary, {k: v["checks"] for k, v in p.gates.items()})
    assert set(p.verdicts.values()) <= {"pass", "warn", "skipped"}, {k: v["checks"] for k, v in p.gates.items()}
    assert p.verdicts["validation"] == "skipped" and "no evaluation seen" in p.gates["validation"]["message"]
    assert p.verdicts["update_first"] == "pass" and p.verdicts["update_second"] == "pass"


def test_gan_generator_layer_left_out(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = probe(campaign, capsys, "gan.py", tmp_path / "o", "--defect", "gen-layer-left-out")
    c = p.check("update_second", "optimizer holds every parameter with a gradient")
    assert not c["ok"] and "2.weight" in c["detail"] and p.summary["status"] == "failed"


def test_ema_and_best_model_deep_copies(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = same_run(campaign, capsys, tmp_path, "ema_copy.py")
    assert (p.code, p.summary["status"]) == (0, "passed"), (p.summary, {k: v["checks"] for k, v in p.gates.items()})
    assert set(p.verdicts.values()) <= {"pass", "warn"}, {k: v["checks"] for k, v in p.gates.items()}
    assert p.gates["validation"]["verdict"] == "pass" and "best.pt" in p.gates["save"]["inputs"]["files"]


def test_ema_evaluated_in_training_mode(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = probe(campaign, capsys, "ema_copy.py", tmp_path / "o", "--defect", "ema-train-mode")
    c = p.check("validation", "eval mode")
    assert not c["ok"] and "model.eval()" in c["detail"] and p.summary["status"] == "failed"


def test_accelerate_loop_with_accumulation(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = same_run(campaign, capsys, tmp_path, "accelerate_loop.py")
    assert (p.code, p.summary["status"]) == (0, "passed"), (p.summary, {k: v["checks"] for k, v in p.gates.items()})
    assert set(p.verdicts.values()) <= {"pass", "warn"}, {k: v["checks"] for k, v in p.gates.items()}
    assert p.gates["update_first"]["inputs"]["microbatches"] == 2 and p.gates["forward"]["inputs"]["microbatch"] == 8
    assert p.check("update_second", "gradients zeroed between updates")["ok"]


def test_accelerate_loop_evaluated_in_training_mode(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = probe(campaign, capsys, "accelerate_loop.py", tmp_path / "o", "--defect", "no-eval-mode")
    c = p.check("validation", "eval mode")
    assert not c["ok"] and "model.eval()" in c["detail"] and p.summary["status"] == "failed"


def test_char_lm_sampled_in_training_mode_between_steps_is_not_an_evaluation(campaign, tmp_path, monkeypatch, capsys):
    """A public char-level LM script's shape (issue 35): samples under inference_mode with the model in training
    mode, a real evaluation under model.eval(). Its model has no dropout and no batch norm: the sampling is no
    validation, and the mode would change nothing anyway."""
    monkeypatch.chdir(tmp_path)
    p = same_run(campaign, capsys, tmp_path, "char_lm_sampling.py")
    assert (p.code, p.summary["status"]) == (0, "passed"), (p.summary, {k: v["checks"] for k, v in p.gates.items()})
    assert set(p.verdicts.values()) <= {"pass"}, {k: v["checks"] for k, v in p.gates.items()}
    v = p.gates["validation"]
    assert v["inputs"]["forwards"] == 4 and v["inputs"]["sampling_forwards"] == 15, v
    assert p.check("validation", "eval mode")["ok"] and p.check("validation", "training mode restored")["ok"]


def test_char_lm_with_dropout_evaluated_in_training_mode(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    p = probe(campaign, capsys, "char_lm_sampling.py", tmp_path / "o", "--defect", "dropout-eval-train")
    c = p.check("validation", "eval mode")
    assert not c["ok"] and "4 of 4" in c["detail"] and "Dropout p=0.2" in c["detail"], c
    assert "model.eval()" in c["detail"] and p.summary["status"] == "failed"
