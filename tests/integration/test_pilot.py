"""The pilot end to end, in real detached processes: every gate, every failure kind.

All pilots of this module start at once (module fixture) and run in parallel;
each test then checks one run's recorded status, phase, message and exit code.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli_w
import tomllib

from cockpit import events as ev
from cockpit import launch, runs
from cockpit import notebook as nbm
from tests.schema_check import off_schema

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cockpit" / "templates" / "demo.toml"
TASKS = Path(__file__).resolve().parents[1] / "pilot_tasks"


def make_campaign(root: Path, name: str, entry: str | None = None, **params) -> Path:
    data = tomllib.loads(DEMO.read_text())
    data["campaign"]["name"] = name
    data.pop("runs", None)
    data.pop("decisions", None)
    if entry:
        data["task"]["entry"] = entry
    data["task"]["params"].update({"train_examples": 400, "val_examples": 32, "test_examples": 32, **params})
    d = root / name
    d.mkdir(parents=True)
    (d / "campaign.toml").write_text(tomli_w.dumps(data))
    return d


def wait_phase(rdir: Path, phase: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        evs = ev.read_events(rdir / ev.EVENTS_FILE)
        if any(e["kind"] == ev.PHASE_START and e.get("phase") == phase for e in evs):
            return
        if not runs.is_alive(rdir):
            raise AssertionError(f"{rdir.name} ended before phase {phase}: {(rdir / 'output.log').read_text()[-2000:]}")
        time.sleep(0.1)
    raise AssertionError(f"{rdir.name} never reached {phase}")


@pytest.fixture(scope="module")
def pilots(tmp_path_factory):
    root = tmp_path_factory.mktemp("pilots")
    specs = {
        "ok": (None, {"PYTHONPROFILEIMPORTTIME": "1"}),
        "oom": (None, {"COCKPIT_INJECT": "oom:worst_case"}),
        "nonfinite": (None, {"COCKPIT_INJECT": "nonfinite:update_second"}),
        "usererr": (f"{TASKS / 'raising.py'}:task", {}),
        "meanloss": (f"{TASKS / 'mean_loss.py'}:task", {}),
        "term": (None, {"COCKPIT_INJECT": "sleep:accumulation"}),
        "kill": (None, {"COCKPIT_INJECT": "sleep:update_second"}),
    }
    started = {}
    for name, (entry, env) in specs.items():
        camp = make_campaign(root, name, entry)
        # one thread each: seven pilots share the machine's cores
        rid, rdir = launch.new_run(camp, None, 0, env={"OMP_NUM_THREADS": "1", **env})
        started[name] = (camp, rid, rdir)
    # the signal cases: stop them once they are inside the phase that sleeps
    _, _, term_dir = started["term"]
    wait_phase(term_dir, "accumulation")
    assert launch.stop(term_dir, grace_s=20).startswith("stopped")
    _, _, kill_dir = started["kill"]
    wait_phase(kill_dir, "update_second")
    os.killpg(os.getpgid(runs.process_info(kill_dir)["pid"]), signal.SIGKILL)
    for _camp, _rid, rdir in started.values():
        assert launch.wait(rdir, timeout=300), f"{rdir} still running"
    return started


def result(pilots, name):
    camp, rid, rdir = pilots[name]
    nb = runs.settle(camp)  # what a command that changes the campaign does first
    return nb.run(rid), runs.state(rdir), rdir


def test_demo_pilot_passes_every_gate(pilots):
    row, st, rdir = result(pilots, "ok")
    assert st.status == "passed", (rdir / "output.log").read_text()[-3000:]
    assert [g["phase"] for g in st.gates] == list(ev.PHASES)
    assert all(g["verdict"] == "pass" for g in st.gates), [
        (g["phase"], g["checks"]) for g in st.gates if g["verdict"] != "pass"
    ]
    assert row.status == "passed" and row.phase == "export" and row.peak_mib > 0 and row.duration_s > 0
    assert st.run_end["exit_code"] == 0
    assert off_schema(rdir) == []


def test_gpu_counters_absent_not_zero_on_cpu(pilots):
    _, st, rdir = result(pilots, "ok")
    for g in st.gates:
        assert g["mem"]["torch"] is None and g["mem"]["nvml"] is None
        assert g["mem"]["rss"] > 50 * 2**20
        assert g["duration_s"] >= 0
    start = next(e for e in ev.read_events(rdir / ev.EVENTS_FILE) if e["kind"] == ev.RUN_START)
    assert start["stack"]["torch"] and start["stack"]["gpus"] == [] and start["stack"]["cuda_available"] is False
    assert start["stack"]["driver"] is None


def test_sampler_runs_at_ten_hertz_or_more(pilots):
    _, st, rdir = result(pilots, "ok")
    evs = ev.read_events(rdir / ev.EVENTS_FILE)
    samples = [e for e in evs if e["kind"] == ev.SAMPLE]
    span = samples[-1]["t"] - samples[0]["t"]
    assert len(samples) / span >= 10, f"{len(samples)} samples over {span:.1f} s"
    assert all(s["nvml"] is None and s["rss"] > 0 for s in samples)


def test_first_and_second_update_measured_apart_and_worst_case_on_longest(pilots):
    _, st, _ = result(pilots, "ok")
    by = {g["phase"]: g for g in st.gates}
    assert by["update_first"]["inputs"]["accumulation"] == 8
    assert any(c["name"] == "optimizer state allocated" and c["ok"] for c in by["update_first"]["checks"])
    worst = by["worst_case"]["inputs"]
    assert worst["lengths"] == sorted(worst["lengths"], reverse=True)
    assert min(worst["lengths"]) >= max(by["update_second"]["inputs"]["lengths"])
    assert worst["cropped_to"] == 48


def test_resume_in_new_process_is_bit_identical_on_cpu(pilots):
    _, st, rdir = result(pilots, "ok")
    resume = next(g for g in st.gates if g["phase"] == "resume")
    check = next(c for c in resume["checks"] if c["name"] == "next losses equal the uninterrupted run")
    assert check["ok"] and check["detail"].startswith("bit-identical")
    child = json.loads((rdir / "resume.json").read_text())
    assert child["pid"] != runs.process_info(rdir)["pid"]
    assert child["step"] == resume["inputs"]["from_step"]


def test_export_reloads_safely_and_replays_controls(pilots):
    _, st, rdir = result(pilots, "ok")
    export = next(g for g in st.gates if g["phase"] == "export")
    names = {c["name"]: c for c in export["checks"]}
    assert names["safe reload"]["ok"] and names["replay reproduces control outputs"]["ok"]
    manifest = json.loads((rdir / "artifact" / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.pt", "control.pt"}


def test_pilot_process_imports_no_textual(pilots):
    _, _, rdir = result(pilots, "ok")
    log = (rdir / "output.log").read_text()
    assert "import time:" in log  # the import profile was recorded
    assert "textual" not in log and "| rich" not in log.replace("rich.", "")


def test_injected_oom_is_recorded_with_phase_and_inputs(pilots):
    row, st, _ = result(pilots, "oom")
    assert st.status == "oom" and row.status == "oom" and row.phase == "worst_case"
    assert st.run_end["exit_code"] == int(ev.ExitCode.OOM)
    gate = st.gates[-1]
    assert gate["phase"] == "worst_case" and gate["verdict"] == "fail"
    assert gate["inputs"]["accumulation"] == 8
    assert "out of memory" in gate["message"] and "microbatch" in gate["remedy"]


def test_nonfinite_loss_ends_diverged(pilots):
    row, st, _ = result(pilots, "nonfinite")
    assert st.status == "diverged" and row.phase == "update_second"
    assert st.run_end["exit_code"] == int(ev.ExitCode.NONFINITE)
    assert "non-finite" in st.stop_reason


def test_exception_in_user_code_is_that_phase_failure_with_traceback(pilots):
    row, st, rdir = result(pilots, "usererr")
    assert st.status == "error" and row.phase == "forward"
    assert st.run_end["exit_code"] == int(ev.ExitCode.USER_ERROR)
    gate = st.gates[-1]
    assert "loss() raised ValueError: boom" in gate["message"] and "raising.py" in gate["message"]
    log = (rdir / "output.log").read_text()
    assert "ValueError: boom" in log and "raising.py" in log


def test_per_microbatch_mean_fails_accumulation_gate_only(pilots):
    row, st, _ = result(pilots, "meanloss")
    by = {g["phase"]: g for g in st.gates}
    assert by["accumulation"]["verdict"] == "fail"
    assert "Return (sum, count)" in by["accumulation"]["checks"][-1]["detail"]
    assert "mean per microbatch over uneven counts" in by["accumulation"]["checks"][-1]["detail"]
    assert st.status == "failed" and st.run_end["exit_code"] == 1
    assert by["export"]["verdict"] == "pass"  # an independent gate: the pilot went on to the end
    assert "accumulation" in row.stop_reason


def test_sigterm_is_a_clean_stop(pilots):
    row, st, _ = result(pilots, "term")
    assert st.status == "stopped" and row.status == "stopped" and row.phase == "accumulation"
    assert st.run_end["exit_code"] == int(ev.ExitCode.STOPPED)


def test_sigkill_is_found_and_marked_crashed(pilots):
    row, st, _ = result(pilots, "kill")
    assert st.status == "crashed" and row.status == "crashed" and row.phase == "update_second"
    assert "without a final event" in row.stop_reason
    nb = nbm.load(pilots["kill"][0])
    assert nb.run(pilots["kill"][1]).status == "crashed"  # written back to campaign.toml by settle


def test_cli_json_summary_and_exit_code(tmp_path):
    camp = make_campaign(tmp_path, "cli")
    env = {**os.environ, "COCKPIT_INJECT": "oom:forward"}
    out = subprocess.run(
        [sys.executable, "-m", "cockpit", "pilot", str(camp), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == int(ev.ExitCode.OOM), out.stderr
    data = json.loads(out.stdout)
    assert data["status"] == "oom" and data["phase"] == "forward" and data["gates"][-1]["verdict"] == "fail"
    listing = subprocess.run(
        [sys.executable, "-m", "cockpit", "runs", str(camp), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    rows = json.loads(listing.stdout)
    assert rows[0]["status"] == "oom" and rows[0]["phase"] == "forward"


class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_safe_load_refuses_a_malicious_pickle(tmp_path, monkeypatch):
    import torch

    from cockpit.pilot.checkpoint import UnsafeArtifact, safe_load

    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "model.pt"
    torch.save({"weights": torch.zeros(2), "payload": Evil()}, bad)
    with pytest.raises(UnsafeArtifact, match="refused to load"):
        safe_load(bad)
    assert not (tmp_path / "pwned").exists()
    raw = tmp_path / "raw.pkl"
    raw.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(UnsafeArtifact):
        safe_load(raw)
    assert not (tmp_path / "pwned").exists()
