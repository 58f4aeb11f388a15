"""The screen stack leans on Textual's private ``App._background_screens`` (there is no public hook in 8.2).

These tests fail when Textual renames or stops reading it, or when the pin in pyproject.toml and the installed
Textual part: then either find the public way or update the pin after checking the override still works.
"""

from __future__ import annotations

import inspect
import re
import sys
from importlib.metadata import version
from pathlib import Path

from textual.app import App
from textual.screen import ModalScreen, Screen

from cockpit.tui.screenstack import ScreenStackApp

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


class Opaque(Screen[None]):
    DEFAULT_CSS = "Opaque { background: black; }"


class Dialog(ModalScreen[None]):
    pass  # a modal screen's default background is translucent


def test_textual_is_pinned_to_the_installed_version() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d for d in deps if re.match(r"textual\b", d)]
    assert pins == [f"textual=={version('textual')}"], pins


def test_textual_still_has_the_private_property_the_screen_stack_overrides() -> None:
    assert isinstance(inspect.getattr_static(App, "_background_screens"), property)
    assert "_background_screens" in inspect.getsource(Screen)  # is_current and the repaint read it


async def test_a_screen_under_an_opaque_screen_is_out_of_view_and_under_a_dialog_in_view() -> None:
    app = ScreenStackApp()
    async with app.run_test(size=(40, 10)) as pilot:
        bottom = app.screen
        await app.push_screen(Opaque())
        await pilot.pause()
        # Textual's own rule would keep the bottom screen current (in the background) under the opaque one.
        assert not bottom.is_current
        assert app.hidden(bottom)
        app.pop_screen()
        await app.push_screen(Dialog())
        await pilot.pause()
        assert app.screen.styles.background.a < 1
        assert bottom.is_current
        assert not app.hidden(bottom)
