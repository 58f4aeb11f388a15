"""Issue 14, item 4: every bad notebook gets a clear error, and text never breaks output.

Each bad notebook below was accepted, or crashed a command with a traceback,
before: non-finite or unbounded numbers, values of the wrong type in a
variant's ``set`` or in ``[task.params]`` keys that replace training keys,
unknown run statuses, unreadable files. Every command that loads a notebook
answers with one paragraph that names the file (and the key path), exit 2.
Rich markup in a variant id or a stop reason is printed as written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cockpit import notebook as nbm
from cockpit import runs
from cockpit.cli import main as cli
from tests.conftest import CAMPAIGN_TEXT
from tests.fake_runs import make_campaign, write_run


def _edit(old: str, new: str) -> str:
    assert old in CAMPAIGN_TEXT, old
    return CAMPAIGN_TEXT.replace(old, new, 1)


def _add(extra: str) -> str:
    return CAMPAIGN_TEXT + "\n" + extra + "\n"


# (name, notebook text, the key path the message must name)
BAD: list[tuple[str, str, str]] = [
    ("lr nan", _edit("lr = 1e-4", "lr = nan"), "training.lr"),
    ("lr inf", _edit("lr = 1e-4", "lr = inf"), "training.lr"),
    ("lr huge", _edit("lr = 1e-4", "lr = 1e9"), "training.lr"),
    ("weight decay nan", _edit("weight_decay = 0.01", "weight_decay = nan"), "training.weight_decay"),
    ("grad clip inf", _edit("grad_clip = 1.0", "grad_clip = inf"), "training.grad_clip"),
    ("grad clip negative", _edit("grad_clip = 1.0", "grad_clip = -1.0"), "training.grad_clip"),
    ("momentum 5", _add("").replace("weight_decay = 0.01", "weight_decay = 0.01\nmomentum = 5.0"), "training.momentum"),
    ("warmup negative", _edit("warmup_updates = 0", "warmup_updates = -5"), "training.warmup_updates"),
    ("warmup huge", _edit("warmup_updates = 0", "warmup_updates = 100000000000000"), "training.warmup_updates"),
    ("loss scale nan", _edit('precision = "fp32"', 'precision = "fp32"\nloss_scale_init = nan'), "loss_scale_init"),
    ("epochs inf", _edit("updates = 200", "epochs = inf"), "batch.epochs"),
    ("epochs nan", _edit("updates = 200", "epochs = nan"), "batch.epochs"),
    ("updates huge", _edit("updates = 200", "updates = 1000000000000000"), "batch.updates"),
    ("microbatch 10^12", _edit("microbatch = 2", "microbatch = 1000000000000"), "batch.microbatch"),
    ("accumulation 0", _edit("accumulation = 8", "accumulation = 0"), "batch.accumulation"),
    ("replicas huge", _edit("data_replicas = 1", "data_replicas = 10000000"), "batch.data_replicas"),
    (
        "eval microbatch 10^12",
        _edit("eval_microbatch = 16", "eval_microbatch = 1000000000000"),
        "batch.eval_microbatch",
    ),
    ("examples negative", _edit("updates = 200", "examples = -3"), "batch.examples"),
    ("divergence nan", _edit("divergence_factor = 4.0", "divergence_factor = nan"), "stop.divergence_factor"),
    ("divergence inf", _edit("divergence_factor = 4.0", "divergence_factor = inf"), "stop.divergence_factor"),
    ("patience huge", _edit("patience = 3", "patience = 100000000000"), "stop.patience"),
    ("wall clock nan", _edit("wall_clock_minutes = 30.0", "wall_clock_minutes = nan"), "stop.wall_clock_minutes"),
    ("wall clock inf", _edit("wall_clock_minutes = 30.0", "wall_clock_minutes = inf"), "stop.wall_clock_minutes"),
    ("every updates huge", _edit("every_updates = 50", "every_updates = 100000000000000"), "validation.every_updates"),
    ("overfit steps negative", _edit("overfit_steps = 60", "overfit_steps = -1"), "pilot.overfit_steps"),
    ("overfit steps huge", _edit("overfit_steps = 60", "overfit_steps = 1000000000"), "pilot.overfit_steps"),
    ("overfit examples huge", _edit("overfit_examples = 16", "overfit_examples = 10000000"), "pilot.overfit_examples"),
    (
        "resume updates huge",
        _edit("updates_after_resume = 2", "updates_after_resume = 100000"),
        "pilot.updates_after_resume",
    ),
    (
        "overfit ratio nan",
        _add("").replace("overfit_steps = 60", "overfit_steps = 60\noverfit_loss_ratio = nan"),
        "pilot.overfit_loss_ratio",
    ),
    (
        "grad tolerance inf",
        _add("").replace("overfit_steps = 60", "overfit_steps = 60\ngrad_tolerance = inf"),
        "pilot.grad_tolerance",
    ),
    (
        "headroom negative",
        _add("").replace("overfit_steps = 60", "overfit_steps = 60\nheadroom = -0.5"),
        "pilot.headroom",
    ),
    ("quality target nan", _edit("quality_target = 2.0", "quality_target = nan"), "campaign.quality_target"),
    ("set lr as text", _edit("set = { lr = 5e-5 }", 'set = { lr = "fast" }'), "variants[1].set.lr"),
    ("set lr nan", _edit("set = { lr = 5e-5 }", "set = { lr = nan }"), "variants[1].set.lr"),
    ("set lr inf", _edit("set = { lr = 5e-5 }", "set = { lr = inf }"), "variants[1].set.lr"),
    ("set microbatch 10^12", _edit("set = { lr = 5e-5 }", "set = { microbatch = 1000000000000 }"), "set.microbatch"),
    ("set microbatch 1.5", _edit("set = { lr = 5e-5 }", "set = { microbatch = 1.5 }"), "set.microbatch"),
    ("set precision fp8", _edit("set = { lr = 5e-5 }", 'set = { precision = "fp8" }'), "set.precision"),
    (
        "set checkpointing as text",
        _edit("set = { lr = 5e-5 }", 'set = { activation_checkpointing = "yes" }'),
        "set.activation_checkpointing",
    ),
    ("set epochs inf", _edit("set = { lr = 5e-5 }", "set = { epochs = inf }"), "set.epochs"),
    ("set warmup negative", _edit("set = { lr = 5e-5 }", "set = { warmup_updates = -1 }"), "set.warmup_updates"),
    ("set a date", _edit("set = { lr = 5e-5 }", "set = { lr = 2024-01-01 }"), "set.lr"),
    ("set task param wrong type", _edit("set = { lr = 5e-5 }", 'set = { d_model = "big" }'), "set.d_model"),
    ("set task param nan", _edit("set = { lr = 5e-5 }", "set = { max_length = nan }"), "set.max_length"),
    ("task param shadows lr with text", _edit("d_model = 64", 'd_model = 64\nlr = "fast"'), "task.params.lr"),
    (
        "task param shadows microbatch",
        _edit("d_model = 64", "d_model = 64\nmicrobatch = 1.5"),
        "task.params.microbatch",
    ),
    ("task param shadows device", _edit("d_model = 64", 'd_model = 64\ndevice = "tpu"'), "task.params.device"),
    ("task param nan", _edit("d_model = 64", "d_model = nan"), "task.params.d_model"),
    ("task param a date", _edit("d_model = 64", "d_model = 1979-05-27T07:32:00Z"), "task.params.d_model"),
    ("run status unknown", _add('[[runs]]\nid = "r0001"\nvariant = "lr1e-4"\nstatus = "done"'), "runs[0].status"),
    ("run status markup", _add('[[runs]]\nid = "r0001"\nvariant = "lr1e-4"\nstatus = "[bold]ok"'), "runs[0].status"),
    ("run id ../", _add('[[runs]]\nid = "../r0001"\nvariant = "lr1e-4"'), "runs[0].id"),
    ("run seed negative", _add('[[runs]]\nid = "r0001"\nvariant = "lr1e-4"\nseed = -1'), "runs[0].seed"),
    ("run peak nan", _add('[[runs]]\nid = "r0001"\nvariant = "lr1e-4"\npeak_mib = nan'), "runs[0].peak_mib"),
    ("follows ../", _add('[[runs]]\nid = "r0001"\nvariant = "lr1e-4"\nfollows = "../x"'), "runs[0].follows"),
    ("rental days huge", _add("[rental]\ndays = 100000000"), "rental.days"),
    ("reserve hours nan", _add("[rental]\nreserve_hours = nan"), "rental.reserve_hours"),
    ("selection memory inf", _add("[selection]\nmemory_per_gpu_mib = inf"), "selection.memory_per_gpu_mib"),
    ("variant id with a newline", _edit('id = "lr2e-4"', 'id = "lr2e-4\\n[[runs]]"'), "variants[2].id"),
]


@pytest.mark.parametrize("name,text,path", BAD, ids=[b[0] for b in BAD])
def test_a_bad_value_is_refused_with_its_key_path(tmp_path: Path, name: str, text: str, path: str) -> None:
    (tmp_path / "campaign.toml").write_text(text, "utf-8")
    with pytest.raises(nbm.NotebookError) as err:
        nbm.load(tmp_path)
    msg = str(err.value)
    assert path in msg, msg
    assert str(tmp_path / "campaign.toml") in msg


def test_the_bad_notebooks_are_refused_by_check_as_one_paragraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trials = clean = 0
    for name, text, path in BAD:
        folder = tmp_path / name.replace(" ", "_").replace("/", "_")
        folder.mkdir()
        (folder / "campaign.toml").write_text(text, "utf-8")
        code = cli(["check", str(folder)])
        err = capsys.readouterr().err
        trials += 1
        if code == 2 and path in err and "Traceback" not in err:
            clean += 1
    assert clean == trials == len(BAD)


UNREADABLE = {
    "binary": lambda p: p.write_bytes(b"\x00\x01\x02\xff\xfe" * 100),
    "latin-1": lambda p: p.write_bytes(CAMPAIGN_TEXT.replace("Which", "Wh\xefch").encode("latin-1")),
    "nested too deep": lambda p: p.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n"),
    "nested tables too deep": lambda p: p.write_text("x = " + "{a = " * 5_000 + "1" + "}" * 5_000 + "\n"),
    "a folder": lambda p: p.mkdir(),
    "a fifo": lambda p: os.mkfifo(p),
    "unreadable": lambda p: (p.write_text(CAMPAIGN_TEXT), p.chmod(0)),
    "empty": lambda p: p.write_text(""),
}

COMMANDS = [
    ["check"],
    ["runs"],
    ["compare"],
    ["report"],
    ["sheet"],
    ["plan"],
    ["batch"],
    ["series", "--dry-run"],
    ["pilot", "--detach"],
    ["stop", "CAMP", "r0001"],
    ["inspect", "CAMP", "r0001"],
    # not `tui`: the TUI opens on an unreadable notebook, says why and shows the runs it can read from their
    # folders (tests/tui/test_hostile.py); only a campaign folder with no notebook at all is refused before it opens
]


@pytest.mark.parametrize("kind", list(UNREADABLE))
def test_an_unreadable_notebook_is_one_paragraph_in_every_command(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    camp = tmp_path / "camp"
    camp.mkdir()
    if kind == "unreadable" and os.geteuid() == 0:  # root reads a mode-0 file: the kernel's refusal, simulated
        real_open = os.open
        target = str(camp / "campaign.toml")

        def refusing_open(path: Any, flags: int, *args: Any, **kw: Any) -> int:
            if os.fspath(path) == target and not flags & (os.O_WRONLY | os.O_RDWR):
                raise PermissionError(13, "Permission denied", target)
            return real_open(path, flags, *args, **kw)

        monkeypatch.setattr(os, "open", refusing_open)
    UNREADABLE[kind](camp / "campaign.toml")
    for cmd in COMMANDS:
        argv = (
            [cmd[0], str(camp), *[a for a in cmd[1:] if a != "CAMP"]]
            if "CAMP" not in cmd
            else [
                cmd[0],
                str(camp),
                *cmd[2:],
            ]
        )
        code = cli(argv)
        err = capsys.readouterr().err
        assert code == 2, (kind, argv, code, err)
        assert "Traceback" not in err, (kind, argv, err)
        if cmd[0] not in ("stop", "inspect"):  # these two need only the folder (a stop must work regardless)
            assert "campaign.toml" in err, (kind, argv, err)
        assert len(err.strip().splitlines()) <= 3, err
    (camp / "campaign.toml").chmod(0o644) if kind == "unreadable" else None


MARKUP = ["[/bold]", "[bold red]x", "[link=file:///etc/passwd]y[/link]", "a[/]b", "\\[x]"]


def test_markup_in_a_gate_table_and_an_inspected_example_is_printed_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from cockpit.commands.pilot import print_result

    camp = make_campaign(tmp_path)
    gate = {
        "phase": "[/data]",
        "verdict": "fail",
        "checks": [{"name": "[b]", "ok": False, "detail": "[/]"}],
        "inputs": {"x": "[/i]"},
        "remedy": "[red]fix[/]",
        "message": "[/]",
        "mem": {"rss": "[x]"},
    }
    rid, rdir = write_run(camp, gates=[gate], status="failed", reason="gate [/data] failed")
    print_result(runs.state(rdir))
    assert "[/data]" in capsys.readouterr().out
    (rdir / "inspect.json").write_text(
        json.dumps(
            {
                "examples": [{"split": "[/s]", "id": "[bold]", "text": [["[/a]", True]], "target": "[/t]", "row": {}}],
                "class_counts": {"[/train]": {"[/x]": 1}},
                "label_names": ["[/x]"],
            }
        )
    )
    assert cli(["inspect", str(camp), rid]) == 0
    out = capsys.readouterr().out
    assert "[/a]" in out and "[/x]" in out


def test_notebook_values_are_checked_before_any_run_starts(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    text = (camp / "campaign.toml").read_text().replace("lr = 0.0001", "lr = nan")
    (camp / "campaign.toml").write_text(text)
    assert cli(["pilot", str(camp), "--detach"]) == 2
    assert not (camp / "runs").exists()
    assert runs.run_dirs(camp) == []
