"""An application whose notifications are shown as written and wait while a dialog is open.

Text in a toast often comes from files (a run id, a notebook error) and must
never be read as markup; a toast shown over a dialog would cover the question
it asks. :class:`ToastApp` holds both rules, apart from the Cockpit
application that uses them (``app.CockpitApp``), so neither grows the other.
A screen with ``DEFERS_TOASTS = True`` (every dialog) holds notifications
until it is closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from .plain import clean, clean_line
from .screenstack import ScreenStackApp

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel


class Toast(TypedDict):
    """A notification's options, as Textual's ``notify`` takes them (held while a dialog is open)."""

    title: str
    severity: SeverityLevel
    timeout: float | None


class ToastApp(ScreenStackApp):
    """Notifications never markup, and held while a dialog waits for an answer."""

    def __init__(self) -> None:
        super().__init__()
        self._deferred: list[tuple[str, Toast]] = []  # notifications held while a dialog is open

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """A toast whose text is shown as written (text from files is never markup).

        While a dialog is open (a question waits for an answer) the toast waits too.
        """
        kw: Toast = {"title": clean_line(title, 120), "severity": severity, "timeout": timeout}
        text = clean(message)
        if getattr(self.screen, "DEFERS_TOASTS", False) if self.is_running and self.screen_stack else False:
            self._deferred.append((text, kw))
            return
        super().notify(text, markup=False, **kw)

    def pop_screen(self) -> Any:  # noqa: ANN401 - Textual's AwaitComplete
        result = super().pop_screen()
        if self._deferred:
            self.call_later(self._flush_notifications)
        return result

    def _flush_notifications(self) -> None:
        if getattr(self.screen, "DEFERS_TOASTS", False):
            return
        held, self._deferred = self._deferred, []
        for text, kw in held:
            super().notify(text, markup=False, **kw)
