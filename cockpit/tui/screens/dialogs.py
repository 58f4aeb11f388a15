"""Modal dialogs: the base every dialog shares, a yes/no question, and starting a pilot.

Every dialog works from the keyboard alone: Enter accepts (ctrl+s in the
multi-field ones), Escape cancels, Tab moves between fields.

A dialog never loses what was typed. It checks the fields itself first
(allowed values are offered as suggestions and named in the message); a
value it refuses marks its field, keeps the text and says what is allowed.
Notifications wait while a dialog is open (``DEFERS_TOASTS``). The other
dialogs build on :class:`Dialog` here and live beside it, each module small
enough to read whole: ``seriesdialog`` (start a series), ``editdialogs``
(the edits saved to campaign.toml) and ``gatedetail`` (one gate in full).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ..plain import one_line, plain

T = TypeVar("T")


class FieldError(ValueError):
    """A value a dialog refuses: which field, and what to write instead."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field


def suggested(value: str, words: Sequence[str]) -> str:
    """What Enter saves in a field with suggestions: the word the field shows in grey, else the text typed."""
    typed = value.strip()
    if not typed:
        return typed
    low = typed.lower()
    for word in words:
        if word.lower().startswith(low):
            return word
    return typed


class Dialog(ModalScreen[T]):
    DEFERS_TOASTS = True  # the app holds notifications while a dialog waits for an answer
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="cancel")]

    def action_cancel(self) -> None:
        self.dismiss(None)

    def error_line(self) -> Static:
        return Static(id="dialog-error", classes="error")

    def mark(self, field: str | None, message: str) -> None:
        """Mark the field the message is about, keep its text, and say what is wrong."""
        for widget in self.query(".-invalid"):
            widget.remove_class("-invalid")
        if field:
            for widget in self.query(f"#{field}"):
                widget.add_class("-invalid")
                widget.focus()
        box = self.query_one("#dialog-error", Static)
        box.update(plain(message, style="bold red"))
        box.display = True

    def unmark(self) -> None:
        for widget in self.query(".-invalid"):
            widget.remove_class("-invalid")
        self.query_one("#dialog-error", Static).display = False


class ConfirmScreen(Dialog[bool]):
    BINDINGS = [
        Binding("y", "yes", "Yes", id="yes"),
        Binding("n,escape", "cancel", "No", id="no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(plain(self.question), classes="question")
            yield Label("y: yes    n or Escape: no", classes="hint")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class StartPilotScreen(Dialog[tuple[str, int]]):
    """Pick a variant (arrows) and a seed, then Enter."""

    BINDINGS = [Binding("ctrl+s", "start", "Start", id="start")]

    def __init__(self, variants: list[str], reference: str) -> None:
        super().__init__()
        self.variants = variants
        self.reference = reference

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Start a pilot: every phase once, gated and measured", classes="title")
            yield Label("variant (arrows, Enter)")
            yield OptionList(
                *[Option(one_line(v, limit=60), id=f"v{i}") for i, v in enumerate(self.variants)], id="variant"
            )
            yield Label("seed")
            yield Input("0", id="seed", compact=True)
            yield self.error_line()
            yield Label("Enter on the seed starts; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.unmark()
        options = self.query_one("#variant", OptionList)
        options.highlighted = self.variants.index(self.reference) if self.reference in self.variants else 0
        options.focus()

    @on(OptionList.OptionSelected, "#variant")
    def variant_chosen(self) -> None:
        self.query_one("#seed", Input).focus()

    @on(Input.Submitted, "#seed")
    def action_start(self) -> None:
        options = self.query_one("#variant", OptionList)
        raw = self.query_one("#seed", Input).value.strip() or "0"
        try:
            seed = int(raw)
        except ValueError:
            self.mark("seed", f"seed: {raw!r} is not a whole number; write one such as 0, 1 or 42")
            return
        index = options.highlighted if options.highlighted is not None else 0
        self.dismiss((self.variants[index], seed))
