"""``cockpit stack``: each item pass or fail, a plain "no GPU" on this machine, never a crash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.commands import stack as st
from cockpit.pilot.stackcheck import MARK
from tests.fake_runs import make_campaign

pytestmark = pytest.mark.slow  # starts real processes or renders whole apps: not in the fast loop

H200 = {
    "python": "3.11.7",
    "torch": "2.11.0+cu128",
    "build": "cuda",
    "cuda": "12.8",
    "cuda_available": True,
    "driver": "570.124.06",
    "gpus": [{"index": 0, "name": "NVIDIA H200", "total": 150_754_820_096, "capability": "9.0"}],
    "bf16": True,
    "nccl": True,
    "gloo": True,
    "kernels": [{"index": 0, "fp32": True, "bf16": True}],
    "extensions": [{"module": "flash_attn", "ok": True, "version": "2.7.4"}],
}


def cockpit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, timeout=300)


def test_this_machine_says_plainly_whether_it_has_a_gpu(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    proc = cockpit("stack", str(camp), "--json")
    data = json.loads(proc.stdout)
    assert "Traceback" not in proc.stderr
    names = [i["name"] for i in data["items"]]
    assert names[:3] == ["torch", "CUDA runtime", "driver"] and "NCCL" in names and "bf16" in names
    assert data["items"][0]["status"] == "pass"
    if data["stack"]["gpus"]:
        assert any(n.startswith("GPU 0") for n in names)
    else:
        assert proc.returncode == 1 and not data["ok"]
        assert data["verdict"].startswith("NO GPU on this machine")
        text = cockpit("stack", str(camp))
        assert text.returncode == 1 and "NO GPU on this machine" in text.stdout and "FAIL    GPUs" in text.stdout
        assert "this machine cannot be recommended for a GPU rental" in text.stdout


def test_declared_extensions_are_imported_in_the_child(tmp_path: Path) -> None:
    info = st.probe(("json", "cockpit_no_such_extension"))
    its = {i.name: i for i in st.items(info, st.Needs(extensions=("json", "cockpit_no_such_extension")))}
    assert its["import json"].status == "pass"
    bad = its["import cockpit_no_such_extension"]
    assert bad.status == "fail" and "ModuleNotFoundError" in bad.detail


def test_a_gpu_stack_that_passes() -> None:
    needs = st.Needs(extensions=("flash_attn",), bf16=True, nccl=True)
    its = st.items(H200, needs)
    assert [i.status for i in its] == ["pass"] * len(its)
    assert "GPU 0" in [i.name for i in its]
    assert next(i for i in its if i.name == "GPU 0").detail == "NVIDIA H200, 143,771 MiB, compute capability 9.0"
    ok, line = st.verdict(H200, its, needs)
    assert ok and line == "PASS: the stack can run this campaign on 1 x NVIDIA H200."


@pytest.mark.parametrize(
    "change, needs, failing",
    [
        ({"bf16": False, "kernels": [{"index": 0, "fp32": True}]}, st.Needs(bf16=True), "bf16"),
        ({"nccl": False}, st.Needs(nccl=True), "NCCL"),
        (
            {"extensions": [{"module": "flash_attn", "ok": False, "error": "ImportError: undefined symbol"}]},
            st.Needs(extensions=("flash_attn",)),
            "import flash_attn",
        ),
        (
            {"kernels": [{"index": 0, "error": "RuntimeError: no kernel image is available"}]},
            st.Needs(),
            "GPU 0 kernel",
        ),
    ],
)
def test_each_missing_piece_fails_its_item(change: dict, needs: st.Needs, failing: str) -> None:
    info = {**H200, **change}
    its = st.items(info, needs)
    assert [i.name for i in its if i.status == "fail"] == [failing]
    ok, line = st.verdict(info, its, needs)
    assert not ok and line.startswith(f"FAIL: {failing}")


def test_a_cpu_campaign_passes_without_a_gpu() -> None:
    cpu = {
        "python": "3.11.7",
        "torch": "2.13.0+cpu",
        "build": "cpu",
        "cuda": None,
        "cuda_available": False,
        "driver": None,
        "nvml_error": "NVMLError_LibraryNotFound",
        "gpus": [],
        "bf16": None,
        "nccl": False,
        "gloo": True,
        "kernels": [],
        "extensions": [],
    }
    needs = st.Needs(gpu=False)
    its = st.items(cpu, needs)
    assert not [i for i in its if i.status == "fail"]
    assert st.verdict(cpu, its, needs) == (True, "PASS: the stack can run this campaign on the CPU.")
    ok, line = st.verdict(cpu, st.items(cpu, st.Needs()), st.Needs())
    assert not ok and "torch 2.13.0+cpu is a cpu build" in line


def test_a_child_that_dies_is_a_failed_item_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def dead(*a, **k):
        return subprocess.CompletedProcess(a, -11, stdout="", stderr="Segmentation fault\n")

    monkeypatch.setattr(st.subprocess, "run", dead)
    info = st.probe(())
    assert info["torch_error"].startswith("the check process died (signal 11)")
    its = st.items(info, st.Needs())
    assert its[0].name == "torch" and its[0].status == "fail"
    assert st.verdict(info, its, st.Needs())[1].startswith("FAIL: torch cannot be used")


def test_output_printed_by_an_extension_does_not_confuse_the_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    line = MARK + json.dumps({"torch": "x", "extensions": []})

    def noisy(*a, **k):
        return subprocess.CompletedProcess(a, 0, stdout="hello from an extension\n" + line + "\n", stderr="")

    monkeypatch.setattr(st.subprocess, "run", noisy)
    assert st.probe(("noisy",)) == {"torch": "x", "extensions": []}
