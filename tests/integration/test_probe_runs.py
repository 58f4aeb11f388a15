"""`cockpit probe` on real processes: the two scripts of tests/probe_scripts, unmodified, and scripts that crash,
run out of memory (injected), are killed or are stopped, recorded as a pilot that did."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from cockpit import cli, launch, runs
from cockpit import events as ev
from cockpit import notebook as nbm
from cockpit.probe.config import ProbeConfig
from tests.schema_check import off_schema

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parents[1] / "probe_scripts"
PLAIN = str(SCRIPTS / "plain_loop.py")
HF = str(SCRIPTS / "hf_trainer.py")
PY = sys.executable
MIB = 2**20


def probe(campaign: Path, capsys: Any, *args: str) -> tuple[int, dict[str, Any], runs.RunFiles]:
    code = cli.main(["probe", str(campaign), "--json", *args])
    out = json.loads(capsys.readouterr().out)
    run = runs.read_run(out["dir"])
    assert run is not None
    return code, out, run


def sane(g: dict[str, Any]) -> None:
    """A measured row: a time, and the script's RSS peak within what a tiny model can take (torch absent on CPU)."""
    assert isinstance(g["duration_s"], float) and 0 <= g["duration_s"] < 120, g
    assert 50 * MIB < g["mem"]["rss_peak"] < 6 * 1024 * MIB, g["mem"]
    assert g["mem"]["torch"] is None and g["mem"]["rss"] <= g["mem"]["rss_peak"]


def gone(run: runs.RunFiles) -> bool:
    pid = ((run.gate("stack") or {}).get("inputs") or {}).get("script_pid")
    return pid is None or not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_plain_loop_with_its_own_checkpoint_and_resume_flag(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, run = probe(campaign, capsys, "--steps", "4", "--resume", f"{PY} {PLAIN} --resume", "--", PY, PLAIN)
    assert (code, out["status"]) == (0, "passed"), out
    assert out["stop_reason"].startswith("probe of plain_loop.py: every gate passed; stopped by the probe after")
    g = {x["phase"]: x for x in run.gates}
    assert list(g) == ["stack", "forward", "backward", "update_first", "update_second", "validation", "save", "resume"]
    assert all(x["verdict"] == "pass" for x in g.values()), {p: x["checks"] for p, x in g.items()}
    for phase in ("forward", "backward", "update_first", "update_second", "validation", "save"):
        sane(g[phase])
    assert 0.1 < g["forward"]["loss"] < 2.0  # cross-entropy over 3 classes, divided by the accumulation of 2
    assert g["forward"]["inputs"]["microbatch"] == 8 and g["update_first"]["inputs"]["microbatches"] == 2
    st = g["update_second"]["step_time"]
    assert 1 <= st["n"] <= 3 and 0 < st["min"] <= st["median"] <= st["max"] < 30
    assert g["save"]["bytes"] == (tmp_path / "checkpoint.pt").stat().st_size and g["save"]["inputs"]["files"] == [
        "checkpoint.pt"
    ]
    checks = {c["name"]: c["detail"] for c in g["resume"]["checks"]}
    assert checks["checkpoint loaded"] == "loaded checkpoint.pt"
    assert checks["step restored"].startswith("the first step after the restart is step 6")
    assert checks["next losses equal the uninterrupted run"].startswith("bit-identical: step 6")
    assert g["resume"]["mem"]["rss_peak"] > 50 * MIB
    assert run.probed and run.run_start["probe"]["resume"].endswith("--resume")
    assert off_schema(run.dir) == []
    nb = nbm.load(campaign)
    assert nb.probe is not None and nb.probe.command == [PY, PLAIN] and nb.probe.steps == 4
    row = nb.run(run.id)
    assert (row.kind, row.status, row.phase) == ("probe", "passed", "resume") and row.peak_mib
    assert gone(run)


def test_a_hugging_face_trainer_script(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "hf"
    code, out, run = probe(
        campaign,
        capsys,
        "--steps",
        "3",
        "--resume",
        f"{PY} {HF} --resume --out {out_dir}",
        "--",
        PY,
        HF,
        "--out",
        str(out_dir),
    )
    assert (code, out["status"]) == (0, "passed"), out
    g = {x["phase"]: x for x in run.gates}
    assert g["forward"]["inputs"]["module"] == "GPT2LMHeadModel" and g["forward"]["inputs"]["shapes"]["input_ids"] == [
        4,
        16,
    ]
    for phase in ("forward", "backward", "update_first", "update_second", "validation", "save"):
        sane(g[phase])
    # the Trainer warms up from lr 0: the first step changes nothing, the later ones are checked instead
    first = {c["name"]: c for c in g["update_first"]["checks"]}
    assert (
        g["update_first"]["verdict"] == "warn"
        and "learning rate is 0" in first["targeted parameters changed"]["detail"]
    )
    later = {c["name"]: c for c in g["update_second"]["checks"]}
    assert later["targeted parameters changed"]["ok"] and g["update_second"]["verdict"] == "pass"
    assert g["validation"]["verdict"] == "pass" and 3.0 < g["validation"]["val_loss"] < 5.0  # ln 64 = 4.16
    files = g["save"]["inputs"]["files"]
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt"} <= set(files) and g["save"]["inputs"]["step"] == 4
    assert g["save"]["bytes"] > 100_000
    assert g["resume"]["verdict"] == "pass", g["resume"]["checks"]
    resumed = {c["name"]: c["detail"] for c in g["resume"]["checks"]}
    assert resumed["step restored"].startswith("the first step after the restart is step 5")
    assert resumed["next losses equal the uninterrupted run"].startswith("bit-identical")
    assert gone(run)


def start(campaign: Path, tmp_path: Path, *args: str, inject: str = "", **cfg: Any) -> Path:
    pc = ProbeConfig(
        command=[PY, PLAIN, "--ckpt", str(tmp_path / f"ck{len(args)}{inject}.pt"), *args], cwd=str(tmp_path), **cfg
    )
    env = {"COCKPIT_INJECT": inject} if inject else None
    _, rdir = launch.new_run(campaign, None, 0, kind="probe", nproc=1, env=env, extra={"probe": pc.frozen()})
    return rdir


def test_crashed_out_of_memory_killed_and_stopped_scripts_end_like_a_pilot_that_did(campaign, tmp_path):
    crash = start(campaign, tmp_path, "--crash-at", "2", steps=3)
    oom = start(campaign, tmp_path, inject="oom:backward", steps=3)
    killed = start(campaign, tmp_path, inject="die:update_second", steps=3)
    stopped = start(campaign, tmp_path, "--sleep", "0.5", steps=3, to_end=True)
    deadline = time.monotonic() + 120
    while runs.read_run(stopped).gate("forward") is None:  # type: ignore[union-attr]
        assert time.monotonic() < deadline and runs.is_alive(stopped), "the sleeping probe never trained"
        time.sleep(0.2)
    assert launch.stop(stopped, grace_s=20) == "stopped (SIGTERM)"
    for rdir in (crash, oom, killed, stopped):
        assert launch.wait(rdir, timeout=120)
    runs.settle(campaign)
    want = {
        crash: ("error", ev.ExitCode.USER_ERROR, "update_second", "script"),
        oom: ("oom", ev.ExitCode.OOM, "backward", "memory"),
        killed: ("crashed", ev.ExitCode.CRASHED, "update_second", "script alive"),
        stopped: ("stopped", ev.ExitCode.STOPPED, None, None),
    }
    nb = nbm.load(campaign)
    for rdir, (status, code, phase, check) in want.items():
        run = runs.read_run(rdir)
        assert run is not None and run.state is not None
        assert (run.status, run.state.exit_code) == (status, code), (rdir.name, run.stop_reason)
        assert nb.run(rdir.name).status == status  # the row says the same
        assert gone(run), rdir.name
        if phase is not None:
            never = {g["phase"]: g["message"] for g in run.gates if g["verdict"] == "skipped"}
            assert {g["phase"] for g in run.gates} >= {"stack", "forward", "backward", "update_first", "save"}, never
            assert never and all(m.startswith("never reached: ") for m in never.values()), never
            assert run.phase == phase
            failed = run.gate(phase)
            assert failed is not None and failed["verdict"] == "fail"
            assert [c["name"] for c in failed["checks"] if not c["ok"]] == [check]
            assert failed["remedy"]
    assert "ValueError: bad batch at step 2" in runs.read_run(crash).stop_reason  # type: ignore[union-attr]
    assert "plain_loop.py:" in runs.read_run(crash).stop_reason  # type: ignore[union-attr]
    oom_gate = runs.read_run(oom).gate("backward")  # type: ignore[union-attr]
    assert oom_gate is not None and "holds activations and gradients" in oom_gate["remedy"]  # the pilot's remedy
    assert "SIGKILL" in runs.read_run(killed).stop_reason  # type: ignore[union-attr]
    assert "stopped by signal (SIGTERM)" in runs.read_run(stopped).stop_reason  # type: ignore[union-attr]


def test_nothing_is_installed_without_a_probe(tmp_path):
    """The boot folder on the path but no probe asked for: no hook, no patch, torch untouched."""
    import subprocess

    from cockpit.probe.config import BOOT_DIR

    code = (
        "import torch, sys\n"
        "from torch.nn.modules import module as m\n"
        "opt = sys.modules['torch.optim.optimizer']\n"
        "assert torch.save.__module__ == 'torch.serialization', torch.save\n"
        "assert torch.autograd.backward.__module__ == 'torch.autograd'\n"
        "assert not m._global_forward_pre_hooks and not m._global_forward_hooks\n"
        "assert not opt._global_optimizer_pre_hooks and not opt._global_optimizer_post_hooks\n"
        "assert 'cockpit.probe.instrument' not in sys.modules\n"
        "print('clean')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("COCKPIT_PROBE")}
    env["PYTHONPATH"] = str(BOOT_DIR)
    done = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "clean", done.stderr
