"""Adding and editing a variant from the campaign screen (``e``) at 80x24: its set, differs, why and kind,
checked in the dialog, written to campaign.toml through notebook.mutate, refused where the protocol fixes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from cockpit import notebook as nbm
from cockpit.tui import notebookedits as edits
from cockpit.tui.screens.campaign import CampaignScreen
from cockpit.tui.screens.variantdialog import VariantScreen
from tests.tui.support import screen_text
from tests.tui.test_screens import SIZE, flat, shows, until

pytestmark = pytest.mark.slow  # renders whole apps: not in the fast loop


async def open_dialog(pilot, row: int = 0) -> VariantScreen:
    app = pilot.app
    await until(pilot, shows(app, "r0010"), what="the runs")
    await pilot.press(*["down"] * row, "e")
    await until(pilot, lambda: isinstance(app.screen, VariantScreen), what="the variant dialog")
    return app.screen


async def fill(pilot, field: str, text: str) -> None:
    box = pilot.app.screen.query_one(f"#{field}", Input)
    box.value = ""
    box.focus()
    await pilot.press(*text)  # typed, as a person would (each key goes through the dialog's handlers)


def on_disk(recorded: Path, vid: str) -> nbm.Variant | None:
    return next((v for v in nbm.load(recorded).variants if v.id == vid), None)


async def test_a_new_id_adds_a_variant_from_the_fields_shown(make_app, recorded: Path):
    app = make_app(watch=False)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot)  # r0001: the reference, lr1e-4
        assert "Variant lr1e-4 (the reference)" in screen_text(app)
        await fill(pilot, "id", "lr3e-4")
        assert dialog.seen is None and "New variant lr3e-4" in screen_text(app)
        await fill(pilot, "set", "lr = 3e-4, schedule = cosine")  # a bare word is text
        await fill(pilot, "differs", "learning rate tripled")
        await fill(pilot, "why", "does a larger step still converge")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen), what="the dialog closed once saved")
        await until(pilot, lambda: "variant lr3e-4 added" in "\n".join(n.message for n in app._notifications))
    v = on_disk(recorded, "lr3e-4")
    assert v == nbm.Variant(
        id="lr3e-4",
        set={"lr": 0.0003, "schedule": "cosine"},
        differs="learning rate tripled",
        why="does a larger step still converge",
        kind="quality",
    )
    assert not v.reference and nbm.load(recorded).reference.id == "lr1e-4"
    assert not list(recorded.glob(".campaign*.tmp"))  # written whole, through a temporary replaced at once


@pytest.mark.parametrize(
    ("field", "text", "said"),
    [
        ("set", "lr", "is not KEY = VALUE"),
        ("set", "nonsense = 1", "nonsense: is not a key of [training]"),  # the notebook's own check
        ("set", "lr = -1", "lr: is -1; it must be a positive number"),  # out of the key's range
        ("kind", "bogus", "is not one of quality, memory"),
        ("id", "lr 3", "has a space"),
    ],
)
async def test_a_value_the_notebook_refuses_is_shown_on_its_field(
    make_app, recorded: Path, field: str, text: str, said: str
):
    before = (recorded / "campaign.toml").read_bytes()
    app = make_app(watch=False)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot)
        await fill(pilot, "id", "lr3e-4")
        await fill(pilot, field, text)
        await pilot.press("enter")
        await until(pilot, lambda: "not saved" in flat(app) or said in flat(app), what=f"the error for {field}")
        await until(pilot, lambda: dialog.query_one(f"#{field}", Input).has_class("-invalid"), what="field marked")
        assert said in flat(app), flat(app)
        assert app.screen is dialog and dialog.query_one(f"#{field}", Input).value == text  # what was typed stays
    assert (recorded / "campaign.toml").read_bytes() == before


async def test_a_variant_with_training_runs_keeps_its_settings_and_its_words_can_change(make_app, recorded: Path):
    app = make_app(watch=False)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, row=5)  # r0006: a training run of lr5e-5
        assert dialog.seen is not None and dialog.seen.id == "lr5e-5"
        await fill(pilot, "set", "lr = 6e-5")
        await pilot.press("enter")
        await until(pilot, lambda: "has training runs" in flat(app), what="the protocol's refusal")
        assert "r0006, r0007, r0008" in flat(app) and "Add a new variant" in flat(app)
        assert dialog.query_one("#set", Input).has_class("-invalid")
        assert on_disk(recorded, "lr5e-5").set == {"lr": 5e-05}
        await fill(pilot, "set", "lr = 5e-05")
        await fill(pilot, "why", "half the step: slower but steadier?")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen), what="saved")
    v = on_disk(recorded, "lr5e-5")
    assert v.why == "half the step: slower but steadier?" and v.set == {"lr": 5e-05}


async def test_a_variant_changed_on_disk_meanwhile_is_never_overwritten_unseen(make_app, recorded: Path):
    app = make_app(watch=False)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, row=5)
        nbm.mutate(recorded, lambda nb: setattr(nb.variant("lr5e-5"), "differs", "written by the CLI"))
        await fill(pilot, "differs", "mine")
        await pilot.press("enter")
        await until(pilot, lambda: "changed on disk" in flat(app), what="the conflict")
        assert on_disk(recorded, "lr5e-5").differs == "written by the CLI"
        assert app.screen is dialog and dialog.seen is not None and dialog.seen.differs == "written by the CLI"
        await pilot.press("enter")  # knowingly, over the file's
        await until(pilot, lambda: isinstance(app.screen, CampaignScreen), what="saved on the second Enter")
    assert on_disk(recorded, "lr5e-5").differs == "mine"


def test_overrides_are_read_as_toml_values_and_shown_back_the_same_way() -> None:
    assert edits.parse_set("lr = 5e-5, microbatch = 4") == {"lr": 5e-05, "microbatch": 4}
    assert edits.parse_set('{schedule = "cosine"}') == {"schedule": "cosine"}
    assert edits.parse_set("schedule = cosine, warmup_updates = 10") == {"schedule": "cosine", "warmup_updates": 10}
    assert edits.parse_set("  ") == {}
    with pytest.raises(nbm.NotebookError, match="KEY = VALUE"):
        edits.parse_set("lr")
    assert edits.parse_set(edits.shown_set({"lr": 5e-05, "precision": "bf16"})) == {"lr": 5e-05, "precision": "bf16"}
