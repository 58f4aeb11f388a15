"""The "Bring your code" example campaigns, as a user runs them: pilot, a small series, compare, archive, verify.

``campaigns/hf-lora`` (a Hugging Face causal LM with a PEFT LoRA adapter), ``campaigns/hf-classifier`` (a
Hugging Face sequence classifier) and ``campaigns/lightning`` (a LightningModule and LightningDataModule) are
copied into a temporary folder and piloted as real detached processes; each must pass every gate with no
warning, train two seeds of its reference, compare, and archive; the LoRA archive must hold the adapter only
with the base's identity and replay exactly in a new process. A broken twin of the LoRA case (the base left
trainable, ``tests/bring/hf_lora_base_trainable.py``) must fail the update gate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli_w
import torch

from cockpit import archive as ar
from cockpit import launch, runs
from cockpit.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {"hf-lora": "r8", "hf-classifier": "lr1e-3", "lightning": "h32"}
TWIN = ROOT / "tests" / "bring" / "hf_lora_base_trainable.py"
ENV = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
DEADLINE_S = 1200

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * DEADLINE_S)]


def _wait(dirs: dict[str, Path], deadline: float) -> None:
    while any(runs.is_alive(d) for d in dirs.values()):
        if time.monotonic() > deadline:
            for d in dirs.values():
                launch.stop(d, grace_s=5)
            pytest.fail(f"still running after {DEADLINE_S} s: {', '.join(dirs)}")
        launch.reap()
        time.sleep(0.3)
    launch.reap()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example campaigns copied (without runs), plus the twin's; every pilot, then every series."""
    root = tmp_path_factory.mktemp("bring")
    import tomllib

    for name in EXAMPLES:
        shutil.copytree(
            ROOT / "campaigns" / name, root / name, ignore=shutil.ignore_patterns("runs", "report", "__pycache__", ".*")
        )
        notebook = tomllib.loads((root / name / "campaign.toml").read_text())
        for key in ("runs", "decisions", "selection", "rental", "conclusion"):  # as shipped, whatever ran here
            notebook.pop(key, None)
        (root / name / "campaign.toml").write_text(tomli_w.dumps(notebook))
    twin = root / "hf-lora-twin"
    twin.mkdir()
    doc = tomllib.loads((root / "hf-lora" / "campaign.toml").read_text())
    doc["campaign"]["name"] = "hf-lora-twin"
    doc["task"]["entry"] = f"{TWIN}:task"
    (twin / "campaign.toml").write_text(tomli_w.dumps(doc))
    deadline = time.monotonic() + DEADLINE_S
    env = {**os.environ, **ENV}
    pilots = {}
    for name in [*EXAMPLES, "hf-lora-twin"]:
        pilots[name] = launch.new_run(root / name, None, 0, env=ENV)[1]
        if len(pilots) == 2:  # two at a time on a small machine
            _wait(pilots, deadline)
    _wait(pilots, deadline)
    for name in EXAMPLES:
        st = runs.state(pilots[name])
        assert st.status == "passed", f"{name}: {st.stop_reason}\n{(st.dir / runs.LOG_FILE).read_text()[-3000:]}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "cockpit", "series", str(root / name), "--variants", ref, "--seeds", "0,1"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, ref in EXAMPLES.items()
    ]
    for p in procs:
        out, _ = p.communicate(timeout=max(60.0, deadline - time.monotonic()))
        assert p.returncode == 0, out[-3000:]
    return root


def _runs(root: Path, name: str, kind: str) -> list[runs.RunState]:
    folders = sorted((root / name / "runs").glob("r*"))
    return [runs.state(d) for d in folders if runs.run_meta(d).get("kind", "pilot") == kind]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_passes_every_gate_without_a_warning(root: Path, name: str) -> None:
    (st,) = _runs(root, name, "pilot")
    not_ok = [(g["phase"], c["name"], c["detail"]) for g in st.gates for c in g["checks"] if not c["ok"]]
    assert not not_ok, not_ok
    verdicts = {g["phase"]: g["verdict"] for g in st.gates}
    assert set(verdicts.values()) == {"pass"}, verdicts


def test_the_lora_pilot_proves_the_adapter_case(root: Path) -> None:
    (st,) = _runs(root, "hf-lora", "pilot")
    gate = {g["phase"]: g for g in st.gates}
    first = {c["name"]: c for c in gate["update_first"]["checks"]}
    assert "exactly zero gradient" in first["targeted parameters changed"]["detail"]  # LoRA's A while B is zero
    assert first["base model unchanged"]["ok"]
    assert gate["save"]["inputs"]["trainable_only"] is True  # the adapter and its optimizer state
    assert gate["resume"]["verdict"] == "pass"
    assert gate["export"]["inputs"]["weights"] == "adapter"
    assert "base identical" in next(c for c in gate["export"]["checks"] if c["name"].startswith("replay"))["detail"]
    inspected = json.loads((st.dir / runs.INSPECT_FILE).read_text())["examples"]
    assert inspected and all(isinstance(e.get("generated"), str) for e in inspected)  # beside the target
    forward = gate["forward"]["inputs"]
    assert forward["trainable"] < forward["parameters"] / 4 and forward["loss"] == "sum/count"


def test_cockpit_inspect_shows_the_generated_text(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (st,) = _runs(root, "hf-lora", "pilot")
    assert cli(["inspect", str(st.dir)]) == 0
    out = capsys.readouterr().out
    assert "target" in out and "generated" in out and "after update" in out


def test_the_broken_lora_twin_fails_the_update_gate(root: Path) -> None:
    (st,) = _runs(root, "hf-lora-twin", "pilot")
    assert st.status == "failed", st.stop_reason
    gate = next(g for g in st.gates if g["phase"] == "update_first")
    check = next(c for c in gate["checks"] if c["name"] == "base model unchanged")
    assert gate["verdict"] == "fail" and not check["ok"]
    assert "parameters of the base model under the PEFT adapter changed" in check["detail"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_small_series_trains_exports_and_replays(root: Path, name: str) -> None:
    trained = _runs(root, name, "train")
    assert len(trained) == 2 and all(st.status == "completed" for st in trained), [
        (st.id, st.status, st.stop_reason) for st in trained
    ]
    for st in trained:
        metrics = runs.read_metrics(st.dir)
        assert metrics["replay"]["equal"], metrics["replay"]
        assert metrics["data_revision"]["sha256"]
        assert metrics["replay"]["weights"] == ("adapter" if name == "hf-lora" else "whole model")
    if name == "hf-lora":
        rows = [json.loads(x) for x in (trained[0].dir / runs.PREDICTIONS_FILE).read_text().splitlines()]
        assert sum("generated" in r for r in rows) >= 16 and all("target" in r for r in rows)
        assert metrics["replay"]["generated"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_compare_reads_the_series(root: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["compare", str(root / name), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    text = json.dumps(doc)
    assert EXAMPLES[name] in text and '"n": 2' in text


def test_the_sheet_counts_optimizer_state_for_the_adapter_only(root: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli(["sheet", str(root / "hf-lora")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("- optimizer state:"))
    assert "PEFT adapter default" in line and "the frozen base" in line and "holds none" in line


def test_the_lora_archive_holds_the_adapter_and_the_base_identity_and_replays_in_a_new_process(root: Path) -> None:
    st = _runs(root, "hf-lora", "train")[0]
    out = ar.gather(st.dir, root / "archives" / "lora")
    manifest = json.loads((out / "manifest.json").read_text())
    files = set(manifest["files"])
    assert {"model/model.pt", "model/control.pt", "revisions.json", "config/run.toml"} <= files
    assert not any("checkpoint" in f for f in files)  # no optimizer state
    state = torch.load(out / "model" / "model.pt", weights_only=True)
    assert state and all("lora_" in k for k in state)  # the adapter's tensors only
    exported = json.loads((st.dir / "artifact" / "manifest.json").read_text())
    assert manifest["base"]["sha256"] == exported["base"]["sha256"] and manifest["base"]["values"] > 0
    rev = json.loads((out / "revisions.json").read_text())
    assert rev["task_code_sha256"] == runs.read_run_toml(st.dir)["revisions"]["task_code"]
    assert rev["data_revision"]["sha256"] == runs.read_metrics(st.dir)["data_revision"]["sha256"]
    assert {"transformers", "peft", "torch"} <= set(rev["packages_at_run"])
    proc = subprocess.run(
        [sys.executable, "-m", "cockpit", "archive", "--verify", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **ENV},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    replayed = next(x for x in proc.stdout.splitlines() if x.startswith("rebuilt with"))
    assert "bit-identical" in replayed and "generated texts identical" in replayed and "base identical" in replayed


@pytest.mark.parametrize("name", ["hf-classifier", "lightning"])
def test_the_other_examples_archive_and_verify_by_replaying(root: Path, name: str) -> None:
    st = _runs(root, name, "train")[0]
    out = ar.gather(st.dir, root / "archives" / name)
    v = ar.verify(out)
    assert v.ok, v.problems
    assert any(line.startswith("rebuilt with") and "bit-identical" in line for line in v.lines), v.lines


def test_verify_refuses_an_adapter_over_another_base(root: Path) -> None:
    """Last in this module: it changes the copied base model the LoRA runs were trained on, then restores it."""
    from safetensors.torch import load_file, save_file

    out = root / "archives" / "lora"
    if not out.is_dir():
        out = ar.gather(_runs(root, "hf-lora", "train")[0].dir, out)
    weights = root / "hf-lora" / "base" / "model.safetensors"
    kept = weights.read_bytes()
    try:
        tensors = load_file(weights)
        name = next(k for k in tensors if k.endswith("embed_tokens.weight"))
        tensors[name] = tensors[name] + 1e-3
        save_file(tensors, weights, metadata={"format": "pt"})
        v = ar.verify(out)
    finally:
        weights.write_bytes(kept)
    assert not v.ok
    assert any("not the one the adapter was trained on" in p for p in v.problems), v.problems
