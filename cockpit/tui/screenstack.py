"""The screen stack: an application that keeps the screens under an opaque screen out of its frames.

Textual counts the screen directly under the top one as "in the background"
(visible through it) even when the top screen is opaque. Such a screen stays
"current": each message it handles (a run's news, a timer) repaints it whole,
and a background screen's repaint is pushed to the top one as a full-screen
repaint, which marks the background screen for repainting again. With the
campaign screen under a running run's screen that was ten full repaints a
second: 13 % of a core on an idle TUI (``bench/tui_idle.py``).

Here a screen under an opaque top screen is not in the background: it is
hidden, updates only its own state, and is laid out and repainted once when it
is shown again (Textual's screen resume). Under a dialog (a modal screen with
a translucent background) the screens below stay visible, as Textual has them.
:meth:`ScreenStackApp.hidden` tells a screen whether it is out of view, so that it can
leave its periodic work (rescans, live rows) until it is shown again.

Textual 8.2 has no public hook for which screens show through the top one, so this overrides its private
``App._background_screens`` (the property ``Screen.is_current`` and the compositor read). pyproject.toml pins
textual exactly for it, and tests/tui/test_screen_stack.py fails when that name moves or stops being read.
"""

from __future__ import annotations

from textual.app import App
from textual.screen import Screen


class ScreenStackApp(App[None]):
    @property
    def _background_screens(self) -> list[Screen]:
        stack = self._screen_stack
        if stack and stack[-1].styles.background.a == 1:
            return []  # nothing shows through an opaque screen
        return App._background_screens.fget(self)  # type: ignore[attr-defined]

    def hidden(self, screen: Screen) -> bool:
        """Whether ``screen`` is out of every frame now: in the stack under an opaque screen (or not shown)."""
        return not screen.is_current
