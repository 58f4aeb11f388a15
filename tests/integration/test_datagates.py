"""Data gates through the real pilot: every check fails on a deliberately broken task.

Each case writes a campaign into tmp_path whose ``[task] entry`` is a file in
``tests/broken_tasks`` (``path/to/file.py:attribute``) or a built-in task, and
starts the pilot exactly as ``cockpit pilot`` does (``launch.new_run``:
a detached process). The cases run in parallel, a few at a time, in one
module-scoped fixture.

Cases whose check lives in the data, leakage or forward gate do not need the
later phases: the pilot is started with ``COCKPIT_INJECT=sleep:<next phase>``
(the pilot's own test hook) and stopped with SIGTERM as soon as the gate of
interest is recorded. The healthy tasks and the model that cannot learn run
every phase to the end.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from cockpit import events as ev
from cockpit import launch, runs
from tests.shelf.run import running_still

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "tests" / "broken_tasks"
PARALLEL = 3
DEADLINE_S = 840  # every case together; about a minute on an idle 2-core machine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(DEADLINE_S + 60)]  # the first test waits for the module's pilots

TINY_LM = {
    "d_model": 32,
    "n_layers": 1,
    "n_heads": 2,
    "max_length": 48,
    "train_examples": 256,
    "val_examples": 32,
    "test_examples": 32,
}
TINY_CLS = {
    "d_model": 16,
    "hidden": 32,
    "max_length": 16,
    "dropout": 0.1,
    "train_examples": 256,
    "val_examples": 32,
    "test_examples": 32,
}


@dataclass
class Case:
    entry: str
    params: dict[str, Any]
    stop_after: str | None = None  # the gate after which the pilot is stopped (None: run to the end)
    batch: dict[str, Any] = field(default_factory=lambda: {"microbatch": 4, "accumulation": 2, "eval_microbatch": 32})
    pilot: dict[str, Any] = field(
        default_factory=lambda: {"updates_after_resume": 1, "overfit_examples": 16, "overfit_steps": 60}
    )
    notebook: Path | None = None  # a shipped campaign.toml to copy instead of writing one


def broken(name: str) -> str:
    return f"{BROKEN / name}"


CASES: dict[str, Case] = {
    # healthy built-ins: every gate, no warning
    "tinylm": Case("cockpit.tasks.tinylm:task", {**TINY_LM, "d_model": 64, "n_layers": 2, "n_heads": 4}),
    "classifier": Case(
        "cockpit.tasks.classifier:task", {}, notebook=ROOT / "campaigns" / "classifier" / "campaign.toml"
    ),
    # overfit
    "cannot_learn": Case(
        broken("cannot_learn.py:task"),
        TINY_CLS,
        stop_after="overfit",
        pilot={"updates_after_resume": 1, "overfit_examples": 16, "overfit_steps": 40},
    ),
    # forward: initial loss
    "hot_init": Case(broken("cannot_learn.py:hot"), TINY_CLS, stop_after="forward"),
    # data: identifiers
    "duplicated_ids": Case(broken("duplicated_ids.py:task"), TINY_LM, stop_after="data"),
    "missing_ids": Case(broken("duplicated_ids.py:missing"), TINY_LM, stop_after="data"),
    # data: label mapping and targets
    "swapped_labels": Case(broken("swapped_labels.py:task"), TINY_CLS, stop_after="data"),
    "merged_labels": Case(broken("swapped_labels.py:merged"), TINY_CLS, stop_after="data"),
    "one_based_labels": Case(broken("swapped_labels.py:one_based"), TINY_CLS, stop_after="data"),
    "per_split_labels": Case(broken("swapped_labels.py:per_split"), TINY_CLS, stop_after="data"),
    # data: masks and lengths
    "unmasked_instruction": Case(broken("unmasked_instruction.py:task"), TINY_LM, stop_after="data"),
    "unmasked_no_loss_mask": Case(broken("unmasked_instruction.py:no_loss_mask"), TINY_LM, stop_after="data"),
    "padding_in_loss": Case(broken("padding_in_loss.py:task"), TINY_LM, stop_after="data"),
    "truncated_targets": Case(broken("truncated_targets.py:task"), {**TINY_LM, "max_length": 20}, stop_after="data"),
    "tiny_max_length": Case(broken("truncated_targets.py:tiny"), TINY_LM, stop_after="data"),
    "uncropped": Case(broken("truncated_targets.py:uncropped"), TINY_LM, stop_after="data"),
    # leakage
    "leaking_split": Case(broken("leaking_split.py:task"), TINY_CLS, stop_after="leakage"),
    "period_before_train": Case(broken("leaking_split.py:period"), TINY_CLS, stop_after="leakage"),
    "copied_inputs": Case(broken("leaking_split.py:copied_inputs"), TINY_CLS, stop_after="leakage"),
}


def campaign_text(name: str, case: Case) -> str:
    doc = {
        "campaign": {"name": name, "question": f"does the pilot catch {name}?", "held_constant": "updates"},
        "task": {"entry": case.entry, "params": case.params},
        "batch": {**case.batch, "updates": 20, "data_replicas": 1},
        "training": {"lr": 1e-3, "optimizer": "adamw", "weight_decay": 0.0, "grad_clip": 1.0, "device": "cpu"},
        "variants": [{"id": "ref", "reference": True, "differs": "reference", "why": "the only one"}],
        "pilot": case.pilot,
    }
    return tomli_w.dumps(doc)


@dataclass
class Result:
    state: runs.RunState
    rdir: Path

    @property
    def gates(self) -> list[dict[str, Any]]:
        """The gates the pilot completed (not the one it was sleeping in when the test stopped it)."""
        return [g for g in self.state.gates if not any(c["name"] == "stopped" for c in g["checks"])]

    def gate(self, phase: str) -> dict[str, Any]:
        found = [g for g in self.gates if g["phase"] == phase]
        assert found, f"no {phase} gate in {self.rdir}: {[g['phase'] for g in self.gates]}; log:\n{self.log()}"
        return found[-1]

    def check(self, phase: str, name: str) -> dict[str, Any]:
        g = self.gate(phase)
        found = [c for c in g["checks"] if c["name"] == name]
        assert found, f"no check {name!r} in {phase}: {[c['name'] for c in g['checks']]}"
        return found[0]

    def failed(self, phase: str) -> list[str]:
        return [c["name"] for c in self.gate(phase)["checks"] if not c["ok"]]

    def log(self) -> str:
        p = self.rdir / runs.LOG_FILE
        return p.read_text()[-4000:] if p.exists() else ""


def _next_phase(phase: str) -> str:
    return ev.PHASES[ev.PHASES.index(phase) + 1]


def _start(root: Path, name: str, case: Case) -> Path:
    folder = root / "campaigns" / name
    folder.mkdir(parents=True)
    text = case.notebook.read_text("utf-8") if case.notebook else campaign_text(name, case)
    (folder / "campaign.toml").write_text(text, "utf-8")
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if case.stop_after:
        env["COCKPIT_INJECT"] = f"sleep:{_next_phase(case.stop_after)}"
    _, rdir = launch.new_run(folder, None, 0, env=env)
    return rdir


def _gate_seen(rdir: Path, phase: str) -> bool:
    return any(g["phase"] == phase for g in ev.gates(ev.read_events(rdir / ev.EVENTS_FILE)))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    root = tmp_path_factory.mktemp("datagates")
    pending = list(CASES.items())
    running: dict[str, Path] = {}
    done: dict[str, Result] = {}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while pending or running:
            while pending and len(running) < PARALLEL:
                name, case = pending.pop(0)
                running[name] = _start(root, name, case)
            for name, rdir in list(running.items()):
                case = CASES[name]
                if case.stop_after and runs.is_alive(rdir) and _gate_seen(rdir, case.stop_after):
                    launch.stop(rdir, grace_s=10)
                if not running_still(rdir):  # not runs.is_alive alone: a clock step makes a live pilot look gone
                    launch.reap()
                    done[name] = Result(runs.state(rdir), rdir)
                    del running[name]
            if time.monotonic() > deadline:
                pytest.fail(f"pilots still running after {DEADLINE_S} s: {sorted(running)} (done: {sorted(done)})")
            time.sleep(0.1)
    finally:
        for rdir in running.values():  # never leave a pilot behind, whatever ended the wait
            launch.stop(rdir, grace_s=2)
    return done


# --------------------------------------------------------------------------- healthy tasks


@pytest.mark.parametrize("name", ["tinylm", "classifier"])
def test_healthy_builtin_passes_every_gate_without_warning(results: dict[str, Result], name: str) -> None:
    r = results[name]
    assert r.state.status == "passed", (r.state.stop_reason, r.log())
    verdicts = {g["phase"]: g["verdict"] for g in r.gates}
    assert list(verdicts) == list(ev.PHASES)
    assert set(verdicts.values()) == {"pass"}, {
        p: [c for c in g["checks"] if not c["ok"]] for p, g in ((g["phase"], g) for g in r.state.gates)
    }
    doc = json.loads((r.rdir / "inspect.json").read_text())
    assert [e["split"] for e in doc["examples"]] == ["train"] * 4 + ["val"] * 2
    overfit = r.check("overfit", "loss falls below threshold")
    assert "proves the mechanics, not generalisation" in overfit["detail"]
    assert r.check("overfit", "targets recovered")["ok"]


def test_tinylm_inspection_shows_what_the_loss_receives(results: dict[str, Result]) -> None:
    r = results["tinylm"]
    doc = json.loads((r.rdir / "inspect.json").read_text())
    first = doc["examples"][0]
    row = first["row"]
    assert set(row) >= {"input_ids", "attention_mask", "labels", "loss_mask"}
    # one microbatch padded together: every row has the same width, padding is ignored
    widths = {len(e["row"]["input_ids"]) for e in doc["examples"] if e["split"] == "train"}
    assert len(widths) == 1
    for e in doc["examples"]:
        assert all(lab == -100 for lab, m in zip(e["row"]["labels"], e["row"]["attention_mask"], strict=True) if m == 0)
        spans = e["text"]
        assert [sup for _, sup in spans] == [False, True]  # instruction masked, answer supervised
        assert spans[1][0].startswith(e["target"][:1])
    data = r.gate("data")
    assert data["truncation"] == {
        "examples": 256,
        "lose_target_tokens": 0,
        "no_target_left": 0,
        "longer_than_max": 0,
        "max_length": 48,
    }


def test_classifier_inspection_has_label_names_and_class_counts(results: dict[str, Result]) -> None:
    from cockpit.tasks import classifier

    r = results["classifier"]
    doc = json.loads((r.rdir / "inspect.json").read_text())
    assert doc["label_names"] == classifier.LABEL_NAMES
    assert set(doc["class_counts"]) == {"train", "val", "test"}
    assert list(doc["class_counts"]["train"]) == classifier.LABEL_NAMES  # in id order, every class present
    assert sum(doc["class_counts"]["train"].values()) == 2048
    data = classifier.datasets({})
    by_id = {e["id"]: e for split in data.values() for e in split}
    for e in doc["examples"]:
        assert e["label_name"] == by_id[e["id"]]["label"] == classifier.LABEL_NAMES[e["target"]]
        assert e["text"] == by_id[e["id"]]["text"]
    assert "truncation" not in r.gate("data")


# --------------------------------------------------------------------------- overfit and forward


def test_model_that_cannot_learn_fails_overfit(results: dict[str, Result]) -> None:
    r = results["cannot_learn"]
    g = r.gate("overfit")
    assert g["verdict"] == "fail"
    assert set(r.failed("overfit")) == {"loss falls below threshold", "targets recovered"}
    assert "cannot fit 16 examples" in r.check("overfit", "loss falls below threshold")["detail"]
    assert "examples with a wrong target: train-" in r.check("overfit", "targets recovered")["detail"]
    assert "proves the mechanics, not generalisation" in g["message"]
    # every earlier gate passed: only overfitting a tiny subset shows this bug
    phases = [x["phase"] for x in r.gates]
    assert phases == list(ev.PHASES[: ev.PHASES.index("overfit") + 1])
    assert {x["phase"] for x in r.gates if x["verdict"] != "pass"} == {"overfit"}


def test_initial_loss_far_from_uniform_is_a_warning_with_figures(results: dict[str, Result]) -> None:
    r = results["hot_init"]
    g = r.gate("forward")
    assert g["verdict"] == "warn"
    c = r.check("forward", "initial loss as the objective implies")
    assert c.get("warn") and not c["ok"]
    assert "ln 4 = 1.386" in c["detail"] and "far above uniform" in c["detail"]
    assert g["initial_loss"]["ratio"] > 2


# --------------------------------------------------------------------------- data gate


def test_duplicated_ids(results: dict[str, Result]) -> None:
    r = results["duplicated_ids"]
    assert r.gate("data")["verdict"] == "fail"
    assert r.failed("data") == ["identifiers unique"]
    d = r.check("data", "identifiers unique")["detail"]
    assert "ids used more than once" in d and "'ex-00000' at train[0] and val[0] and test[0]" in d


def test_missing_ids(results: dict[str, Result]) -> None:
    r = results["missing_ids"]
    assert "identifiers present" in r.failed("data")
    assert "2 examples without an id: train[3], train[7]" in r.check("data", "identifiers present")["detail"]


def test_swapped_label_mapping(results: dict[str, Result]) -> None:
    r = results["swapped_labels"]
    assert r.failed("data") == ["targets match label names"]
    d = r.check("data", "targets match label names")["detail"]
    assert "is 'sports' but target 1 is 'weather'" in d or "is 'weather' but target 0 is 'sports'" in d
    assert "'sports' -> 1 ('weather')" in d and "'weather' -> 0 ('sports')" in d
    assert "train-0" in d
    assert "fix the label -> id mapping" in r.gate("data")["message"]


def test_label_mapping_not_one_to_one(results: dict[str, Result]) -> None:
    r = results["merged_labels"]
    assert "label mapping one-to-one" in r.failed("data")
    d = r.check("data", "label mapping one-to-one")["detail"]
    assert "train: target 2 stands for 'food' (" in d and "'music' (" in d


def test_targets_out_of_range(results: dict[str, Result]) -> None:
    r = results["one_based_labels"]
    assert "targets in range" in r.failed("data")
    d = r.check("data", "targets in range")["detail"]
    assert "outside 0..3 (4 label names)" in d and "(target 4)" in d


def test_label_mapping_differs_between_splits(results: dict[str, Result]) -> None:
    r = results["per_split_labels"]
    failed = r.failed("data")
    assert "label mapping same in every split" in failed
    d = r.check("data", "label mapping same in every split")["detail"]
    assert "val's label names differ from the task's" in d
    assert "val maps 'music' to 0 (val-" in d and "but train maps it to 1 (train-" in d


def test_unmasked_instruction(results: dict[str, Result]) -> None:
    r = results["unmasked_instruction"]
    assert r.failed("data") == ["instruction not in the loss"]
    d = r.check("data", "instruction not in the loss")["detail"]
    assert "256 examples supervise instruction tokens" not in d  # every split is scanned, not only train
    assert "examples supervise instruction tokens (label != -100 where loss_mask == 0): train-00000 (" in d


def test_unmasked_instruction_without_loss_mask(results: dict[str, Result]) -> None:
    r = results["unmasked_no_loss_mask"]
    # the collate computes the answer span as loss_mask and nothing reads it: the field check names that too
    assert r.failed("data") == ["instruction not in the loss", "every input field read"]
    assert r.check("data", "every input field read").get("warn")
    assert "loss_mask" in r.check("data", "every input field read")["detail"]
    d = r.check("data", "instruction not in the loss")["detail"]
    assert "have every attended position supervised" in d and "train-00000" in d


def test_padding_in_the_loss(results: dict[str, Result]) -> None:
    r = results["padding_in_loss"]
    assert r.failed("data") == ["padding not in the loss"]
    d = r.check("data", "padding not in the loss")["detail"]
    assert "padded positions (attention_mask == 0) whose label is not -100" in d
    assert " positions)" in d and "train-" in d


def test_truncated_targets(results: dict[str, Result]) -> None:
    r = results["truncated_targets"]
    g = r.gate("data")
    assert g["verdict"] == "fail"
    assert r.failed("data") == ["supervised tokens left", "targets not truncated"]
    trunc = g["truncation"]
    assert trunc["examples"] == 256 and trunc["max_length"] == 20
    assert 0 < trunc["no_target_left"] < trunc["lose_target_tokens"] <= trunc["longer_than_max"] <= 256
    d = r.check("data", "supervised tokens left")["detail"]
    assert (
        f"{trunc['no_target_left']} of 256 (" in d and "no supervised token left after cropping to max_length 20" in d
    )
    w = r.check("data", "targets not truncated")
    assert w["warn"] and f"{trunc['lose_target_tokens']} of 256" in w["detail"] and "assumed" not in w["detail"]
    # what cropping took is measured: collated again without the limit, the same examples keep more targets
    from cockpit.tasks import tinylm

    train = tinylm.datasets(TINY_LM)["train"]
    full = tinylm.collate(train, {"max_length": 200})["labels"].ne(-100).sum(1)
    cut = [tinylm.collate([e], {"max_length": 20})["labels"].ne(-100).sum().item() for e in train]
    assert trunc["lose_target_tokens"] == sum(int(f) > c for f, c in zip(full.tolist(), cut, strict=True))
    assert trunc["no_target_left"] == cut.count(0)


def test_batches_with_every_position_ignored(results: dict[str, Result]) -> None:
    r = results["tiny_max_length"]
    assert "no batch entirely ignored" in r.failed("data")
    d = r.check("data", "no batch entirely ignored")["detail"]
    assert "microbatches of the first epoch have every position ignored" in d and "batch 0 (" in d


def test_lengths_over_the_maximum(results: dict[str, Result]) -> None:
    r = results["uncropped"]
    assert "lengths within maximum" in r.failed("data")
    d = r.check("data", "lengths within maximum")["detail"]
    assert "examples longer than max_length 24 after collate" in d and "crop in collate" in d


# --------------------------------------------------------------------------- leakage


def test_leaking_split(results: dict[str, Result]) -> None:
    r = results["leaking_split"]
    g = r.gate("leakage")
    assert g["verdict"] == "fail"
    d = r.check("leakage", "train/val disjoint")["detail"]
    assert "sources in both train and val" in d and "all-src" in d and "(train all-" in d and "; val all-" in d
    assert "split by source" in d
    assert g["remedy"]


def test_period_split_must_come_after_train(results: dict[str, Result]) -> None:
    r = results["period_before_train"]
    assert r.failed("leakage") == ["val after train"]
    d = r.check("leakage", "val after train")["detail"]
    assert "1 val periods" in d and "not after the last train period 2021-05: 2021-01 (val-" in d
    assert r.check("leakage", "test after train")["ok"]


def test_identical_inputs_across_splits_warn(results: dict[str, Result]) -> None:
    r = results["copied_inputs"]
    g = r.gate("leakage")
    assert g["verdict"] == "warn"
    c = r.check("leakage", "no identical inputs across splits")
    assert c["warn"] and "3 examples repeat an input of another split" in c["detail"]
    assert "train-00000 = val-copy-0" in c["detail"]


# --------------------------------------------------------------------------- cockpit inspect


def test_cockpit_inspect_prints_the_recorded_examples(
    results: dict[str, Result], capsys: pytest.CaptureFixture[str]
) -> None:
    from cockpit.cli import main

    r = results["tinylm"]
    assert main(["inspect", str(r.rdir)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((r.rdir / "inspect.json").read_text())
    for e in doc["examples"]:
        assert f"{e['split']} {e['id']}" in out
        assert e["target"] in out
    assert "supervised" in out and "attention_mask" in out and "-100" in out
    assert "data gate: pass" in out

    campaign = r.rdir.parent.parent
    assert main(["inspect", str(campaign), r.rdir.name, "--split", "val", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
    assert main(["inspect", str(campaign), "--id", doc["examples"][5]["id"]]) == 0  # latest inspected run
    out = capsys.readouterr().out
    assert doc["examples"][5]["id"] in out and doc["examples"][0]["id"] not in out


def test_cockpit_inspect_shows_failures_and_class_counts(
    results: dict[str, Result], capsys: pytest.CaptureFixture[str]
) -> None:
    from cockpit.cli import main

    assert main(["inspect", str(results["swapped_labels"].rdir)]) == 0
    out = capsys.readouterr().out
    assert "data gate: fail" in out and "targets match label names" in out
    assert "class counts" in out and "weather" in out
    assert main(["inspect", str(results["truncated_targets"].rdir)]) == 0
    assert "cropping to max_length 20" in capsys.readouterr().out


def test_cockpit_inspect_errors_are_one_paragraph(
    tmp_path: Path, results: dict[str, Result], capsys: pytest.CaptureFixture[str]
) -> None:
    from cockpit.cli import main

    assert main(["inspect", str(tmp_path)]) == 2
    assert "neither a run folder" in capsys.readouterr().err
    campaign = results["tinylm"].rdir.parent.parent
    assert main(["inspect", str(campaign), "r9999"]) == 2
    assert "no run 'r9999'" in capsys.readouterr().err
    run_dir = tmp_path / "r0001"
    run_dir.mkdir()
    (run_dir / "run.toml").write_text("")
    assert main(["inspect", str(run_dir)]) == 2
    assert "inspect.json: not written" in capsys.readouterr().err


def test_inspect_command_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, cockpit.commands.inspect; assert 'torch' not in sys.modules and 'textual' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
