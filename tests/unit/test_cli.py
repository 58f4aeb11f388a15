"""The ``cockpit`` entry point and the new, check and batch commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit import notebook
from cockpit.cli import COMMANDS, main


def _run(*args: str, columns: int = 80, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


# --------------------------------------------------------------------------- help


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_help_lists_every_command_on_exactly_one_line(columns: int) -> None:
    proc = _run("-m", "cockpit", "--help", columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for name, desc in COMMANDS.items():
        listed = [line for line in lines if line.split()[:1] == [name]]
        assert len(listed) == 1, f"{name!r} is listed {len(listed)} times"
        assert listed[0].strip().endswith(desc), f"{name!r}'s description is wrapped or cut"


def test_help_imports_neither_torch_nor_textual() -> None:
    code = (
        "import sys, contextlib, io\n"
        "sys.argv = ['cockpit', '--help']\n"
        "import cockpit.cli as c\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        c.main()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('torch' in sys.modules, 'textual' in sys.modules)\n"
    )
    proc = _run("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("command", ["new", "check", "batch"])
def test_these_commands_import_neither_torch_nor_textual(command: str) -> None:
    code = (
        "import sys\n"
        "from cockpit.cli import main\n"
        f"main([{command!r}, '--help']) if False else None\n"
        f"import cockpit.commands.{command}\n"
        "print('torch' in sys.modules, 'textual' in sys.modules)\n"
    )
    proc = _run("-c", code)
    assert proc.stdout.split() == ["False", "False"], proc.stderr


def test_python_dash_m_cockpit_works() -> None:
    proc = _run("-m", "cockpit", "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("cockpit "), proc.stderr
    proc = _run("-m", "cockpit", "batch", "--micro", "2", "--accum", "8", "--examples", "3200")
    assert proc.returncode == 0, proc.stderr
    assert "16 = microbatch 2" in proc.stdout


def test_unknown_command_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


# --------------------------------------------------------------------------- new


def test_new_creates_a_valid_campaign_and_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "sweep", "--dir", str(tmp_path)]) == 0
    path = tmp_path / "sweep" / "campaign.toml"
    assert notebook.load(path).campaign.name == "sweep"
    assert "cockpit pilot" in capsys.readouterr().out
    path.write_text(path.read_text("utf-8") + "\n# mine\n", "utf-8")
    before = path.read_bytes()
    assert main(["new", "sweep", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and str(path) in err
    assert path.read_bytes() == before


def test_new_writes_a_task_to_fill_in_and_only_the_settings_it_uses(tmp_path: Path) -> None:
    assert main(["new", "mine", "--dir", str(tmp_path)]) == 0
    nb = notebook.load(tmp_path / "mine")
    assert nb.task.entry == "task.py:task"
    assert set(nb.task.params) == {"features", "hidden"}  # the demo's d_model, n_layers ... are not there
    assert nb.campaign.quality_target is None and nb.campaign.notes == ""
    source = (tmp_path / "mine" / "task.py").read_text()
    for said in ("def datasets(params)", "def collate(examples, params)", "def build_model(params)", "def loss("):
        assert said in source
    assert "Return" in source and "campaign mine" in source
    # --task: the user's own file; no task.py is written and no demo parameters are left behind
    assert main(["new", "theirs", "--dir", str(tmp_path), "--task", "train_task.py:task"]) == 0
    assert not (tmp_path / "theirs" / "task.py").exists()
    assert notebook.load(tmp_path / "theirs").task.params == {}


def test_new_example_demo_is_the_shipped_demo(tmp_path: Path) -> None:
    assert main(["new", "demo", "--dir", str(tmp_path), "--example", "demo"]) == 0
    shipped = (Path(__file__).resolve().parents[2] / "cockpit" / "templates" / "demo.toml").read_text()
    assert (tmp_path / "demo" / "campaign.toml").read_text() == shipped
    assert not (tmp_path / "demo" / "task.py").exists()


def test_the_first_command_dirties_no_file_git_tracks() -> None:
    """README command 1 pilots campaigns/demo, which its pilots write into: no file of it is tracked."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout (an sdist): nothing is tracked")
    tracked = subprocess.run(["git", "ls-files", "campaigns/demo"], cwd=root, capture_output=True, text=True)
    assert tracked.returncode == 0 and tracked.stdout.strip() == ""
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "campaigns/demo/campaign.toml"], cwd=root, capture_output=True, text=True
    )
    assert ignored.returncode == 0


def test_new_refuses_a_name_that_is_no_folder_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "../escape", "--dir", str(tmp_path)]) == 2
    assert "not a usable campaign name" in capsys.readouterr().err
    assert not (tmp_path.parent / "escape").exists()


def test_new_in_a_subprocess_uses_the_campaigns_folder(tmp_path: Path) -> None:
    proc = _run("-m", "cockpit", "new", "demo2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "campaigns" / "demo2" / "campaign.toml").exists()


# --------------------------------------------------------------------------- check


def test_check_of_a_broken_notebook_is_one_message_and_exit_2(campaign: Path) -> None:
    path = campaign / "campaign.toml"
    path.write_text(path.read_text("utf-8").replace("accumulation = 8", "accumulation = 0"))
    proc = _run("-m", "cockpit", "check", str(campaign))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr and "batch.accumulation: is 0" in proc.stderr
    assert proc.stdout == ""


def test_check_of_broken_toml_names_the_line(campaign: Path) -> None:
    path = campaign / "campaign.toml"
    path.write_text(path.read_text("utf-8").replace("[validation]", "[validation"))
    proc = _run("-m", "cockpit", "check", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not valid TOML at line" in proc.stderr and "[validation" in proc.stderr


def test_check_of_a_missing_campaign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "nowhere")]) == 2
    assert "cockpit new NAME" in capsys.readouterr().err


# --------------------------------------------------------------------------- batch


def test_batch_seed_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batch", "--micro", "2", "--accum", "8", "--examples", "3200"]) == 0
    out = capsys.readouterr().out
    assert "examples per update  16 " in out
    assert "updates              200 " in out
    assert "predict neither duration nor quality" in out


def test_batch_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batch", "--micro", "2", "--accum", "8", "--examples", "3200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["reference"]["examples_per_update"] == 16
    assert data["reference"]["budget"]["updates"] == 200
    assert "predict neither duration nor quality" in data["caveat"]


def test_batch_keep_last_replicas_and_model_parallel(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["batch", "--micro", "2", "--accum", "8", "--replicas", "2", "--model-parallel", "4"]
    args += ["--dataset-size", "3210", "--epochs", "1", "--keep-last", "--json"]
    assert main(args) == 0
    ref = json.loads(capsys.readouterr().out)["reference"]
    assert ref["examples_per_update"] == 32  # model parallelism does not multiply it
    assert ref["gpus"] == 8
    assert ref["updates_per_epoch"] == 101  # 100 full updates and one of 10 examples
    assert ref["budget"]["examples_seen"] == 3210


@pytest.mark.parametrize(
    ("held", "budget", "expected"),
    [
        ("updates", ["--updates", "200"], "examples seen change 3200 -> 6400"),
        ("epochs", ["--epochs", "1"], "updates change 200 -> 100"),
        ("examples", ["--examples", "3200"], "updates change 200 -> 100"),
    ],
)
def test_batch_comparison(held: str, budget: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["batch", "--micro", "2", "--accum", "8", "--dataset-size", "3200", *budget]
    assert main([*args, "--held", held, "--vs-micro", "4"]) == 0
    assert expected in capsys.readouterr().out


def test_batch_comparison_holds_the_budget_quantity_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["batch", "--micro", "2", "--accum", "8", "--examples", "3200", "--vs-accum", "16"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["held"] == "examples"
    assert data["variants"][0]["budget"]["updates"] == 100


def test_batch_of_a_campaign(campaign: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batch", str(campaign), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["held"] == "updates"
    assert data["reference"]["label"] == "lr1e-4"
    assert data["reference"]["budget"]["updates"] == 200
    assert [v["label"] for v in data["variants"]] == ["lr5e-5", "lr2e-4"]
    assert all(v["budget"]["updates"] == 200 for v in data["variants"])
    assert main(["batch", str(campaign)]) == 0
    assert "Variant lr2e-4" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--micro", "0"], "--micro is 0"),
        (["--micro", "2", "--accum", "0"], "--accum is 0"),
        (["--micro", "2", "--epochs", "1"], "--dataset-size"),
        (["--micro", "2", "--examples", "-5"], "cannot be negative"),
        (["--micro", "2", "--vs-micro", "4"], "needs a budget"),
        (["--micro", "2", "--updates", "5", "--held", "epochs"], "--vs-micro"),
        (["--micro", "2", "--updates", "5", "--vs-micro", "4", "--held", "epochs"], "dataset size"),
        ([], "give the microbatch"),
        (["campaigns/demo", "--micro", "2"], "either a campaign or numbers"),
    ],
)
def test_batch_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batch", *args]) == 2
    assert message in capsys.readouterr().err


def test_batch_refuses_two_budgets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["batch", "--micro", "2", "--updates", "5", "--epochs", "1"])
    assert info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["sheet"], ["runs", "--json"], ["runs"], ["compare"]])
def test_a_closed_reader_is_not_a_disk_error(argv: list[str], tmp_path: Path) -> None:
    """Issue 36: `cockpit runs | head` ended "Broken pipe. Check the file and the disk". The reader is closed before
    the command writes a byte, so its first write meets the closed pipe: it exits quietly, as Unix tools do."""
    import shutil

    from tests.tui.support import FIXTURE

    campaign = tmp_path / "demo"
    shutil.copytree(FIXTURE, campaign)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cockpit", argv[0], str(campaign), *argv[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert err == "", err
    assert code == 141  # 128 + SIGPIPE, as a shell reports a Unix tool's (Rich's consoles hand the pipe to the CLI)
