"""Helpers the TUI tests import: the recorded campaign's folder and the text an app shows."""

from __future__ import annotations

from pathlib import Path

from textual.app import App

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "demo"  # the recorded campaign (written by tests/tui/make_fixture.py)


def screen_text(app: App) -> str:
    """Every line of the current screen, modal dialogs and notifications included."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)
