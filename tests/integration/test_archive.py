"""Archive a real pilot run, load it back with hashes checked and safe loading only, refuse tampering."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cockpit import archive as ar
from tests.fake_runs import piloted_copy

# One real pilot runs in this module (about 20 s alone; minutes on a machine shared with other suites).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class Payload:
    """Any object other than tensors and containers: pickling it is what safe loading refuses."""

    def __reduce__(self):
        return (print, ("this would have run on load",))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    camp = piloted_copy(tmp_path_factory.mktemp("archive"))
    (rdir,) = [p for p in (camp / "runs").iterdir() if (p / "artifact" / "model.pt").is_file()]
    return rdir


@pytest.fixture
def archived(run_dir: Path, tmp_path: Path) -> Path:
    return ar.gather(run_dir, tmp_path / "arch")


def _rehash(folder: Path, name: str) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    m["files"][name]["sha256"] = ar.sha256(folder / name)
    (folder / "manifest.json").write_text(json.dumps(m))


def test_round_trip(run_dir: Path, archived: Path) -> None:
    files = {str(p.relative_to(archived)) for p in archived.rglob("*") if p.is_file()}
    for name in (
        "model/model.pt",
        "model/control.pt",
        "model/artifact_manifest.json",
        "config/run.toml",
        "config/variant.toml",
        "revisions.json",
        "metrics/events.jsonl",
        "metrics/output.log",
        "README.md",
        "manifest.json",
    ):
        assert name in files, name
    manifest = json.loads((archived / "manifest.json").read_text())
    assert set(manifest["files"]) == files - {"manifest.json"}
    assert manifest["run"] == run_dir.name and manifest["status"] == "passed"
    v = ar.load(archived)
    assert v.ok, v.problems
    original = torch.load(run_dir / "artifact" / "model.pt", weights_only=True)
    assert set(v.state) == set(original) and all(torch.equal(v.state[k], original[k]) for k in original)
    rev = json.loads((archived / "revisions.json").read_text())
    assert rev["task_entry"] == "cockpit.tasks.tinylm:task" and rev["task_source"].endswith("tinylm.py")
    assert isinstance(rev["task_code"], dict) and len(rev["task_code"]["commit"]) == 40  # this repo is a git checkout
    assert rev["packages_at_run"]["torch"] == torch.__version__
    readme = (archived / "README.md").read_text()
    assert "weights_only=True" in readme and "cockpit archive --verify" in readme
    proc = subprocess.run(
        [sys.executable, "-m", "cockpit", "archive", "--verify", str(archived)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "tensors" in proc.stdout and "verified" in proc.stdout


def test_a_changed_byte_is_refused_before_loading(archived: Path) -> None:
    p = archived / "model" / "model.pt"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    v = ar.verify(archived)
    assert not v.ok and v.state is None
    assert any(x.startswith("model/model.pt: SHA-256") and "changed after archiving" in x for x in v.problems)
    proc = subprocess.run(
        [sys.executable, "-m", "cockpit", "archive", "--verify", str(archived)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "verification failed" in proc.stderr and "Traceback" not in proc.stderr


def test_added_and_missing_files_are_refused(archived: Path) -> None:
    (archived / "metrics" / "extra.csv").write_text("a,b\n")
    (archived / "config" / "run.toml").unlink()
    problems = ar.verify(archived).problems
    assert "metrics/extra.csv: not in the manifest (added after archiving)" in problems
    assert "config/run.toml: missing" in problems


def test_a_pickled_object_is_refused_even_with_a_matching_hash(
    archived: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save({"weight": torch.zeros(2), "hook": Payload()}, archived / "model" / "model.pt")
    _rehash(archived, "model/model.pt")
    v = ar.verify(archived)
    assert not v.ok and v.state is None
    assert any(x.startswith("model/model.pt: REFUSED by safe loading") and "arbitrary code" in x for x in v.problems)
    assert "this would have run on load" not in capsys.readouterr().out


def test_archive_refuses_to_overwrite_and_a_changed_artifact(run_dir: Path, archived: Path, tmp_path: Path) -> None:
    with pytest.raises(ar.ArchiveError, match="never overwrites"):
        ar.gather(run_dir, archived)
    with pytest.raises(ar.ArchiveError, match="no run.toml; give a run folder"):
        ar.gather(run_dir.parent.parent, tmp_path / "x")
    copy = tmp_path / "runs" / "r9999"
    shutil.copytree(run_dir, copy)
    bare = tmp_path / "runs" / "r9998"
    shutil.copytree(run_dir, bare, ignore=shutil.ignore_patterns("artifact", "checkpoint.pt"))
    with pytest.raises(ar.ArchiveError, match="nothing to archive: no exported artifact"):
        ar.gather(bare, tmp_path / "z")
    with open(copy / "artifact" / "control.pt", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ar.ArchiveError, match="no longer matches the export's manifest"):
        ar.gather(copy, tmp_path / "y")


def test_revisions_outside_git(tmp_path: Path) -> None:
    task = tmp_path / "mytask.py"
    task.write_text("task = None\n")
    assert ar.task_source("mytask.py:task", tmp_path) == task.resolve()
    assert ar.git_revision(task) == "not a git checkout"
    assert ar.task_source("cockpit.tasks.tinylm:task", None).name == "tinylm.py"


def test_a_run_without_an_export_is_archived_as_its_checkpoints_model_state(run_dir: Path, tmp_path: Path) -> None:
    """The evaluation artifact, never the optimizer state: a stopped run gives its final checkpoint's model."""
    series = tmp_path / "runs" / "r0100"
    shutil.copytree(run_dir, series, ignore=shutil.ignore_patterns("artifact"))
    state = torch.load(run_dir / "artifact" / "model.pt", weights_only=True)
    optimizer = {"state": {0: {"exp_avg": torch.ones(3)}}, "param_groups": []}
    torch.save({"model": state, "optimizer": optimizer, "step": 40, "status": "stopped"}, series / "checkpoint.pt")
    out = ar.gather(series, tmp_path / "arch")
    assert (out / "model" / "model.pt").is_file() and not (out / "model" / "checkpoint.pt").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert "optimizer, scheduler and RNG state left out" in manifest["weights_from"]
    v = ar.verify(out)
    assert v.ok, v.problems
    assert set(v.state) == set(state) and all(torch.equal(v.state[k], state[k]) for k in state)
    assert any("not rebuilt or replayed" in line for line in v.lines)  # no control outputs without an export


def test_verify_rebuilds_the_model_and_replays_the_control_inputs(archived: Path) -> None:
    v = ar.verify(archived)
    assert v.ok, v.problems
    line = next(x for x in v.lines if x.startswith("rebuilt with cockpit.tasks.tinylm:task and replayed"))
    assert "bit-identical" in line
    rev = json.loads((archived / "revisions.json").read_text())
    assert len(rev["task_code_sha256"]) == 64 and len(rev["data_revision"]["sha256"]) == 64
    hashes_only = ar.verify(archived, replay=False)
    assert hashes_only.ok and not any(x.startswith("rebuilt") for x in hashes_only.lines)


def test_verify_refuses_weights_that_do_not_replay(archived: Path) -> None:
    """Other weights with a matching hash in the manifest: safe to load, but not the model that was exported."""
    state = torch.load(archived / "model" / "model.pt", weights_only=True)
    name = next(k for k, t in state.items() if t.is_floating_point())
    # noise, not a constant: a constant added to an embedding is undone by the LayerNorm after it
    state[name] = state[name] + 0.5 * torch.randn_like(state[name])
    torch.save(state, archived / "model" / "model.pt")
    _rehash(archived, "model/model.pt")
    v = ar.verify(archived)
    assert not v.ok and any("does not reproduce the archive" in p for p in v.problems), (name, v.problems, v.lines)
