"""A user's mistake ends as the user's, named at the user's line, never as "a bug in Cockpit" (issue 36, items 1
to 4; issue 35, class 8): real pilots and checks of a small classifier into which each mistake is written as a
user would write it, checked for their exit code, their words and the file:line, on the terminal, in --json and
in output.log."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit import runs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "campaigns" / "example"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", "PYTHONWARNINGS": "ignore"}


def cockpit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=600
    )


def campaign(tmp_path: Path, name: str, old: str = "", new: str = "", toml: tuple[str, str] = ("", "")) -> Path:
    """campaigns/example as ``name`` with one change to its task file (old -> new) or its notebook."""
    camp = tmp_path / name
    shutil.copytree(EXAMPLE, camp, ignore=shutil.ignore_patterns("runs"))
    task = camp / "my_task.py"
    if old:
        assert old in task.read_text()
        task.write_text(task.read_text().replace(old, new))
    if toml[0]:
        nb = camp / "campaign.toml"
        assert toml[0] in nb.read_text()
        nb.write_text(nb.read_text().replace(*toml))
    return camp


def line_of(camp: Path, text: str) -> int:
    lines = (camp / "my_task.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def the_run(camp: Path) -> runs.RunState:
    (rdir,) = (camp / "runs").iterdir()
    return runs.state(rdir)


def flat(text: str) -> str:
    """Terminal output with its folded lines joined, so a phrase cut by a line end is found."""
    return re.sub(r"\s*\n\s*", " ", text)


def no_cockpit_bug(camp: Path, proc: subprocess.CompletedProcess[str]) -> None:
    log = next((camp / "runs").iterdir()) / "output.log"
    assert proc.returncode != 6, proc.stdout[-3000:]
    for text in (proc.stdout, proc.stderr, log.read_text()):
        assert "bug in Cockpit" not in text and "internal error" not in text, text[-3000:]


LOSS = '    return F.cross_entropy(logits, batch["labels"], reduction="sum"), batch["labels"].numel()'


@pytest.mark.slow  # a real pilot process
def test_a_per_example_loss_fails_the_forward_gate_in_words_that_say_so(tmp_path: Path) -> None:
    camp = campaign(tmp_path, "vecloss", LOSS, '    return F.cross_entropy(logits, batch["labels"], reduction="none")')
    proc = cockpit("pilot", str(camp), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]  # a failed gate: the user's, never exit 6
    no_cockpit_bug(camp, proc)
    out = flat(proc.stdout)
    assert "the loss is not a scalar: shape (8,); reduce it with .mean()" in out
    forward = next(g for g in the_run(camp).gates if g["phase"] == "forward")
    (check,) = [c for c in forward["checks"] if c["name"] == "loss is a scalar"]
    assert not check["ok"] and check["detail"].startswith("the loss is not a scalar: shape (8,)")


BUILD = "def build_model(params):\n    return"


@pytest.mark.slow  # a real pilot process and the task check's child
def test_build_model_raising_names_the_task_line_and_the_campaign_everywhere(tmp_path: Path) -> None:
    camp = campaign(
        tmp_path, "missing", BUILD, 'def build_model(params):\n    torch.load("weights/missing.pt")\n    return'
    )
    line = f"missing/my_task.py:{line_of(camp, 'weights/missing.pt')}"
    proc = cockpit("pilot", str(camp), "--no-task-check", "--json", cwd=tmp_path)
    assert proc.returncode == 5, proc.stdout[-3000:] + proc.stderr[-3000:]
    no_cockpit_bug(camp, proc)
    summary = json.loads(proc.stdout)
    assert line in summary["stop_reason"] and "serialization.py" not in proc.stdout
    forward = next(g for g in summary["gates"] if g["phase"] == "forward")
    assert line in json.dumps(forward)
    assert "`cockpit check missing`" in summary["next"] and "CAMPAIGN" not in summary["next"]
    log = (next((camp / "runs").iterdir()) / "output.log").read_text()
    (said,) = [x for x in log.splitlines() if x.startswith("[error] forward")]
    assert line in said and "serialization.py" not in said

    shutil.rmtree(camp / "runs")
    terminal = cockpit("pilot", str(camp), "--no-task-check", cwd=tmp_path)
    assert terminal.returncode == 5 and line in flat(terminal.stdout)

    check = cockpit("check", str(camp), cwd=tmp_path)  # check fails what the pilot fails at setup
    assert check.returncode == 2, check.stdout
    assert line in check.stderr and "FileNotFoundError" in check.stderr


RECURRENT = """class Recurrent(nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.cell = nn.GRUCell(features, hidden)
        self.head = nn.Linear(hidden, len(LABELS))
        self.state = None

    def forward(self, x):
        if self.state is None or self.state.shape[0] != x.shape[0]:
            self.state = torch.zeros(x.shape[0], self.cell.hidden_size)
        self.state = self.cell(x, self.state)  # kept across batches, never detached
        return self.head(self.state)


def build_model(params):
    return Recurrent(params["features"], params["hidden"])
"""


@pytest.mark.slow  # a real pilot process
def test_state_kept_across_batches_is_the_users_named_with_the_attribute_and_its_line(tmp_path: Path) -> None:
    source = (EXAMPLE / "my_task.py").read_text()
    start = source.index("def build_model(params):")
    end = source.index("\n\n\ndef loss(")
    camp = campaign(tmp_path, "rnn", source[start:end], RECURRENT.rstrip("\n"))
    line = f"rnn/my_task.py:{line_of(camp, 'never detached')}"
    proc = cockpit("pilot", str(camp), cwd=tmp_path)
    assert proc.returncode == 5, proc.stdout[-3000:] + proc.stderr[-3000:]
    no_cockpit_bug(camp, proc)
    st = the_run(camp)
    assert st.phase == "update_second"  # the first update's backward freed the graph the second walks into
    assert st.stop_reason.startswith(f"state kept across batches (Recurrent.state, set at {line})"), st.stop_reason
    assert ".detach()" in st.stop_reason
    out = flat(proc.stdout)
    assert f"Recurrent.state, set at {line}" in out and "`.detach()` the state between batches" in out
    assert "self.state = self.state.detach()" in out  # the remedy names the attribute it found


@pytest.mark.slow  # the task check's child and a real pilot process
def test_a_mistyped_params_key_says_did_you_mean_in_check_and_in_the_pilot(tmp_path: Path) -> None:
    camp = campaign(tmp_path, "typo", toml=("hidden = 32", "hiden = 32"))
    check = cockpit("check", str(camp), cwd=tmp_path)
    assert check.returncode == 2
    assert "KeyError: 'hidden'" in check.stderr and "did you mean 'hiden'?" in check.stderr
    assert f"typo/my_task.py:{line_of(camp, 'def build_model') + 1}" in check.stderr
    proc = cockpit("pilot", str(camp), "--no-task-check", cwd=tmp_path)
    assert proc.returncode == 5
    assert "did you mean 'hiden'?" in the_run(camp).stop_reason


@pytest.mark.slow  # the task check's child
def test_check_reports_the_split_sizes_the_model_and_one_batch_it_measured(tmp_path: Path) -> None:
    camp = campaign(tmp_path, "healthy")
    proc = cockpit("check", str(camp), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"splits\s+train 320, val 80, test 80 examples", out), out
    assert re.search(r"model\s+387 parameters, 387 trainable, built at its real size on the CPU", out), out
    assert re.search(r"one batch\s+x \(8, 8\) float32, labels \(8,\) int64", out), out
    assert re.search(r"epochs seen\s+5\b", out) and "unknown" not in out, out


@pytest.mark.slow  # check, pilot and series are each a real process
@pytest.mark.parametrize("command", ["check", "pilot", "series"])
def test_a_task_param_named_like_a_budget_is_refused_naming_both_keys(tmp_path: Path, command: str) -> None:
    camp = campaign(tmp_path, "budget", toml=("hidden = 32", "hidden = 32\nepochs = 3"))
    proc = cockpit(command, str(camp), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    text = flat(proc.stderr)
    assert "task.params.epochs" in text and "[batch] epochs" in text and "[batch] updates = 100" in text
    assert "Traceback" not in text
    assert not (camp / "runs").exists() or not any((camp / "runs").iterdir())
