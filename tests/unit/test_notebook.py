"""The campaign notebook: round trip, every kind of bad input, conflicts on save."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cockpit import notebook
from cockpit.notebook import ConflictError, NotebookError


def _problem(tmp_path: Path, text: str) -> str:
    """Write ``text`` as a campaign and return the message it is refused with."""
    path = tmp_path / "campaign.toml"
    path.write_text(text, "utf-8")
    with pytest.raises(NotebookError) as info:
        notebook.load(tmp_path)
    message = str(info.value)
    assert str(path) in message, "the message must name the file"
    return message


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, f"the demo campaign no longer contains {old!r}"
    return text.replace(old, new, 1)


# --------------------------------------------------------------------------- good input


def test_demo_loads_into_typed_objects(campaign: Path) -> None:
    nb = notebook.load(campaign)
    assert nb.campaign.name == "demo"
    assert nb.campaign.held_constant == "updates"
    assert (nb.batch.microbatch, nb.batch.accumulation, nb.batch.updates) == (2, 8, 200)
    assert [v.id for v in nb.variants] == ["lr1e-4", "lr5e-5", "lr2e-4"]
    assert nb.reference.id == "lr1e-4"
    assert nb.params("lr2e-4")["lr"] == pytest.approx(2e-4)
    assert nb.params()["lr"] == pytest.approx(1e-4)
    assert nb.validation.every_updates == 50
    assert nb.stop.divergence_factor == 4.0


def test_load_save_load_gives_the_same_objects(campaign: Path) -> None:
    nb = notebook.load(campaign)
    nb.runs.append(notebook.RunRow(id="r0001", variant="lr5e-5", seed=1, status="completed"))
    nb.runs.append(
        notebook.RunRow(
            id="r0002",
            variant="lr1e-4",
            follows="r0001",
            peak_mib=812.5,
            notes="a note\nover two lines with \"quotes\" and 'apostrophes'",
        )
    )
    nb.decisions.append(notebook.Decision(date="2025-01-02", text="keep 1e-4", runs=["r0001"]))
    nb.selection.gpu = "L4 24 GB"
    nb.rental.days = 7
    nb.conclusion.text = "1e-4 it is."
    notebook.save(nb)
    again = notebook.load(campaign)
    assert again == nb
    notebook.save(again)
    assert notebook.load(campaign) == again


def test_saving_drops_comments_and_says_so(campaign: Path) -> None:
    path = campaign / "campaign.toml"
    path.write_text("# my comment\n" + path.read_text("utf-8"), "utf-8")
    nb = notebook.load(campaign)
    nb.campaign.notes = "written in a notes field instead"
    notebook.save(nb)
    text = path.read_text("utf-8")
    assert "# my comment" not in text
    assert "comments are not" in text  # the header tells the reader


def test_template_is_a_valid_notebook() -> None:
    nb = notebook.parse(notebook.template("fresh"))
    assert nb.campaign.name == "fresh"


def test_mutate_applies_a_change_under_the_lock(campaign: Path) -> None:
    notebook.mutate(campaign, lambda nb: nb.runs.append(notebook.RunRow("r0001", "lr1e-4")))
    assert [r.id for r in notebook.load(campaign).runs] == ["r0001"]


# --------------------------------------------------------------------------- bad input


def test_unknown_key_suggests_the_right_one(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "microbatch = 2", "microbatchh = 2"))
    assert "batch.microbatchh" in msg
    assert "did you mean 'microbatch'" in msg


def test_unknown_section_suggests_the_right_one(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "[validation]", "[validaton]"))
    assert "[validaton]" in msg and "did you mean 'validation'" in msg


def test_wrong_type_names_the_key_path(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "microbatch = 2", 'microbatch = "2"'))
    assert "batch.microbatch: expected a whole number, got a string '2'" in msg


def test_wrong_type_of_a_string_field_does_not_crash(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, 'name = "demo"', "name = 5"))
    assert "campaign.name: expected a string" in msg


def test_microbatch_zero(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "microbatch = 2", "microbatch = 0"))
    assert "batch.microbatch: is 0; it must be a whole number >= 1" in msg


def test_accumulation_zero(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "accumulation = 8", "accumulation = 0"))
    assert "batch.accumulation: is 0" in msg


def test_negative_learning_rate(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "lr = 1e-4", "lr = -1e-4"))
    assert "training.lr" in msg and "positive" in msg


def test_negative_learning_rate_in_a_variant(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "set = { lr = 5e-5 }", "set = { lr = -5e-5 }"))
    assert "variants[1].set.lr" in msg


def test_duplicate_variant_ids(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, 'id = "lr2e-4"', 'id = "lr5e-5"'))
    assert "variants[2].id" in msg and "duplicate variant id 'lr5e-5'" in msg


def test_duplicate_run_ids(tmp_path: Path, demo_text: str) -> None:
    runs = '\n[[runs]]\nid = "r0001"\nvariant = "lr1e-4"\n\n[[runs]]\nid = "r0001"\nvariant = "lr5e-5"\n'
    msg = _problem(tmp_path, demo_text + runs)
    assert "runs[1].id" in msg and "duplicate run id 'r0001'" in msg


def test_run_naming_an_unknown_variant(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, demo_text + '\n[[runs]]\nid = "r0001"\nvariant = "lr9"\n')
    assert "runs[0].variant" in msg and "unknown variant 'lr9'" in msg


def test_variant_setting_an_unknown_key(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "set = { lr = 5e-5 }", "set = { lrr = 5e-5 }"))
    assert "variants[1].set.lrr" in msg and "did you mean 'lr'" in msg


def test_missing_section(tmp_path: Path, demo_text: str) -> None:
    text = _edit(demo_text, "updates = 200", "updates = 200\nepochs = 1.0")
    text = text[: text.index("[training]")] + text[text.index("[[variants]]") :]
    msg = _problem(tmp_path, text)
    assert "missing section [training]" in msg


def test_two_budgets(tmp_path: Path, demo_text: str) -> None:
    msg = _problem(tmp_path, _edit(demo_text, "updates = 200", "updates = 200\nepochs = 1.0"))
    assert "exactly one budget" in msg and "updates, epochs" in msg


def test_every_problem_is_listed_at_once(tmp_path: Path, demo_text: str) -> None:
    text = _edit(demo_text, "microbatch = 2", "microbatch = 0")
    text = _edit(text, "accumulation = 8", "accumulation = 0")
    msg = _problem(tmp_path, text)
    assert "2 problems" in msg and "cockpit check" in msg


def test_broken_toml_names_the_line(tmp_path: Path, demo_text: str) -> None:
    text = _edit(demo_text, 'optimizer = "adamw"', "optimizer = adamw")
    line = text.splitlines().index("optimizer = adamw") + 1
    msg = _problem(tmp_path, text)
    assert f"at line {line}" in msg
    assert "optimizer = adamw" in msg  # the line itself is quoted back
    assert "not valid TOML" in msg


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(NotebookError, match="cockpit new NAME"):
        notebook.load(tmp_path)


# --------------------------------------------------------------------------- saving


def test_save_refuses_a_file_changed_since_it_was_read(campaign: Path) -> None:
    path = campaign / "campaign.toml"
    mine = notebook.load(campaign)
    theirs = notebook.load(campaign)
    theirs.campaign.notes = "their change"
    notebook.save(theirs)
    on_disk = path.read_bytes()
    mine.campaign.notes = "my change"
    with pytest.raises(ConflictError, match="changed on disk since it was read"):
        notebook.save(mine)
    assert path.read_bytes() == on_disk, "nothing may be overwritten"


def test_save_refuses_a_hand_edit_made_meanwhile(campaign: Path) -> None:
    path = campaign / "campaign.toml"
    nb = notebook.load(campaign)
    path.write_text(path.read_text("utf-8").replace("lr = 1e-4", "lr = 3e-4"), "utf-8")
    edited = path.read_bytes()
    nb.conclusion.text = "x"
    with pytest.raises(ConflictError):
        notebook.save(nb)
    assert path.read_bytes() == edited


def test_save_refuses_an_invalid_notebook_and_keeps_the_file(campaign: Path) -> None:
    path = campaign / "campaign.toml"
    before = path.read_bytes()
    nb = notebook.load(campaign)
    nb.batch.microbatch = 0
    with pytest.raises(NotebookError, match="batch.microbatch"):
        notebook.save(nb)
    assert path.read_bytes() == before


def test_create_never_overwrites(campaign: Path) -> None:
    path = campaign / "campaign.toml"
    before = path.read_bytes()
    with pytest.raises(ConflictError, match="already exists"):
        notebook.create(path, notebook.template("other"))
    assert path.read_bytes() == before


def test_save_keeps_the_file_mode_and_leaves_no_temporary(campaign: Path) -> None:
    path = campaign / "campaign.toml"
    os.chmod(path, 0o640)
    (campaign / ".campaign.dead.tmp").write_text("a killed writer's leftovers")
    nb = notebook.load(campaign)
    nb.campaign.notes = "changed"
    notebook.save(nb)
    assert path.stat().st_mode & 0o777 == 0o640
    leftovers = [p.name for p in campaign.iterdir() if re.match(r"\.campaign\..*\.tmp$", p.name)]
    assert leftovers == []


def test_the_shipped_demo_campaign_is_what_the_issue_asks_for() -> None:
    # Read from the repository (runs a pilot appended may be there too).
    nb = notebook.parse((Path(__file__).resolve().parents[2] / "cockpit" / "templates" / "demo.toml").read_text())
    quality = [v for v in nb.variants if v.kind == "quality"]
    lrs = sorted(nb.params(v.id)["lr"] for v in quality)
    assert lrs == pytest.approx([5e-5, 1e-4, 2e-4])
    assert nb.params()["lr"] == pytest.approx(1e-4)
    assert nb.campaign.held_constant == "updates"
    for v in quality:
        p = nb.params(v.id)
        assert (p["microbatch"], p["accumulation"], p["data_replicas"], p["updates"]) == (
            2,
            8,
            1,
            200,
        )
        assert set(v.set) <= {"lr"}, "only the learning rate may differ"
    for v in nb.variants:
        if v.kind == "memory":  # memory variants keep the effective batch and the budget
            p = nb.params(v.id)
            assert p["microbatch"] * p["accumulation"] * p["data_replicas"] == 16 and p["updates"] == 200
            assert "lr" not in v.set
    assert nb.validation.every_updates > 0
    assert nb.stop.nonfinite and nb.stop.divergence_factor
