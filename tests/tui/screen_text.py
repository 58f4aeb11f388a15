"""The text a Textual app shows right now, line by line (for assertions)."""

from __future__ import annotations

from textual.app import App


def screen_text(app: App) -> str:
    """Every line of the current screen, modal dialogs and notifications included."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)
