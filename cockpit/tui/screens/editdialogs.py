"""Dialogs that edit campaign.toml: a decision or an observation, a verdict, the conclusion, the selection sheet.

Each saves its edit itself, in a worker, and stays open until the notebook
says it is saved (:class:`EditDialog`), so what was typed is never lost. A
value the notebook refuses marks its field, keeps the text and says what is
allowed; a field changed on disk meanwhile is shown with the file's value,
and Enter then saves over it knowingly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, TextArea

from ... import notebook as nbm
from .. import notebookedits as edits
from ..api import app_of
from ..notebookedits import SELECTION_FIELDS, Saved
from ..plain import one_line
from .dialogs import Dialog, FieldError, suggested

VERDICTS = ("keep", "reject", "rerun", "inconclusive")
CHOICES = {"precision": nbm.PRECISIONS, "strategy": nbm.STRATEGIES}


def problems_of(message: str) -> list[tuple[str, str]]:
    """The (key path, problem) lines of a notebook error; one ("", message) when it has none."""
    found = re.findall(r"^\s+- ([\w.\[\]]+): (.*)$", message, flags=re.MULTILINE)
    return found or [("", message)]


class EditDone(Message):
    """An edit saved in a worker: what was saved, or why not."""

    def __init__(self, saved: Saved | None, error: str = "", conflict: bool = False, now: Any = None) -> None:
        super().__init__()
        self.saved = saved
        self.error = error
        self.conflict = conflict
        self.now = now


class EditDialog(Dialog[None]):
    """A dialog that saves its edit itself and closes only once it is saved."""

    FIELDS: dict[str, str] = {}  # notebook key path (its start) -> the field's id

    def __init__(self) -> None:
        super().__init__()
        self.saving = False

    def save(self, edit: Callable[[], Saved], now: Callable[[], Any] | None = None) -> None:
        """Run ``edit`` in a worker; on a conflict, ``now`` reads what the file holds instead."""
        if self.saving:
            return
        self.saving = True
        self.unmark()

        def work() -> None:
            try:
                saved = edit()
            except nbm.ConflictError as exc:
                value = None
                if now is not None:
                    try:
                        value = now()
                    except Exception:  # noqa: BLE001 - the message says enough without it
                        value = None
                self.post_message(EditDone(None, str(exc), conflict=True, now=value))
                return
            except nbm.NotebookError as exc:
                self.post_message(EditDone(None, str(exc)))
                return
            except (OSError, RecursionError) as exc:
                self.post_message(EditDone(None, f"campaign.toml could not be written: {exc}"))
                return
            self.post_message(EditDone(saved))

        self.run_worker(work, thread=True, group="save", exclusive=True, exit_on_error=False, description="save")

    @on(EditDone)
    def edit_done(self, message: EditDone) -> None:
        self.saving = False
        if message.saved is not None:
            app_of(self).saved(message.saved)
            self.dismiss(None)
            return
        if message.conflict:
            app_of(self).reload_notebook()
            self.conflict(message.now)
            self.mark(None, f"not saved: {message.error}\nEnter saves yours over it; Escape keeps the file's.")
            return
        path, problem = problems_of(message.error)[0]
        field = self.field_for(path)
        where = path.rsplit(".", 1)[-1] if path else ""
        self.mark(field, f"not saved: {where + ': ' if where else ''}{problem}")

    def field_for(self, path: str) -> str | None:
        """The field a notebook problem's key path is about (None: the dialog as a whole)."""
        return next((f for key, f in self.FIELDS.items() if path.startswith(key)), None)

    def conflict(self, now: Any) -> None:
        """The file's value is the one seen from now on (a second Enter saves over it knowingly)."""


class NoteScreen(EditDialog):
    """A decision or an observation, linked to runs; saved at once."""

    FIELDS = {"decisions": "text"}

    def __init__(self, kind: str, run_ids: list[str], digest: str | None) -> None:
        super().__init__()
        self.kind = kind
        self.run_ids = run_ids
        self.digest = digest

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"New {self.kind}", classes="title")
            yield Input(placeholder=f"the {self.kind}, in one sentence", id="text", compact=True)
            yield Label("linked runs (comma separated)")
            yield Input(", ".join(self.run_ids), id="runs", compact=True)
            yield self.error_line()
            yield Label("Enter saves to campaign.toml at once; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.unmark()
        self.query_one("#text", Input).focus()

    @on(Input.Submitted)
    def submitted(self) -> None:
        text = self.query_one("#text", Input).value.strip()
        if not text:
            self.mark("text", f"write the {self.kind} first")
            return
        raw = self.query_one("#runs", Input).value
        linked = [r.strip() for r in raw.replace(" ", ",").split(",") if r.strip()]
        known = [r.id for r in app_of(self).notebook.runs]
        unknown = [r for r in linked if r not in known]
        if unknown:
            shown = ", ".join(known[:6]) + (f" ... {known[-1]}" if len(known) > 6 else "")
            self.mark("runs", f"linked runs: no run {', '.join(map(repr, unknown))}; runs are {shown or 'none yet'}")
            return
        path, kind, digest = app_of(self).notebook_path, self.kind, self.digest
        self.save(lambda: edits.add_note(path, digest, kind, text, linked))


class VerdictScreen(EditDialog):
    FIELDS = {"runs": "verdict"}

    def __init__(self, run_id: str, current: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Verdict on {self.run_id}", classes="title")
            yield Input(
                self.current,
                id="verdict",
                suggester=SuggestFromList(VERDICTS, case_sensitive=False),
                compact=True,
                placeholder=f"{', '.join(VERDICTS)} or your words",
            )
            yield self.error_line()
            yield Label("Enter saves what is shown (a suggestion in grey included); Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.unmark()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        verdict = suggested(event.value, VERDICTS)
        event.input.value = verdict
        path, rid, seen = app_of(self).notebook_path, self.run_id, self.current
        self.save(lambda: edits.set_verdict(path, rid, seen, verdict), now=lambda: nbm.load(path).run(rid).verdict)

    def conflict(self, now: Any) -> None:
        if isinstance(now, str):
            self.current = now


class ConclusionScreen(EditDialog):
    BINDINGS = [Binding("ctrl+s", "save", "Save", id="save")]
    FIELDS = {"conclusion.chosen": "chosen", "conclusion": "text"}

    def __init__(self, current: nbm.Conclusion, variants: list[str]) -> None:
        super().__init__()
        self.current = current
        self.variants = variants

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label("Conclusion", classes="title")
            yield TextArea(self.current.text, id="text", soft_wrap=True, show_line_numbers=False)
            yield Label(one_line(f"chosen variant ({', '.join(self.variants)} or empty)", limit=200))
            yield Input(
                self.current.chosen_variant, id="chosen", compact=True, suggester=SuggestFromList(self.variants)
            )
            yield self.error_line()
            yield Label("ctrl+s saves; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.unmark()
        self.query_one("#text", TextArea).focus()

    @on(Input.Submitted)
    def action_save(self) -> None:
        box = self.query_one("#chosen", Input)
        chosen = suggested(box.value, self.variants)
        box.value = chosen
        if chosen and chosen not in self.variants:
            self.mark(
                "chosen",
                f"chosen variant: no variant {chosen!r}; choose one of {', '.join(self.variants)}, or leave it empty",
            )
            return
        text = self.query_one("#text", TextArea).text
        path, seen = app_of(self).notebook_path, self.current
        self.save(lambda: edits.set_conclusion(path, seen, text, chosen), now=lambda: nbm.load(path).conclusion)

    def conflict(self, now: Any) -> None:
        if isinstance(now, nbm.Conclusion):
            self.current = now


class SelectionScreen(EditDialog):
    BINDINGS = [Binding("ctrl+s", "save", "Save", id="save")]
    FIELDS = {f"selection.{name}": f"f-{name}" for name in SELECTION_FIELDS}

    def __init__(self, current: nbm.Selection) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label("Selection sheet", classes="title")
            with VerticalScroll(id="fields"):
                for name in SELECTION_FIELDS:
                    value = getattr(self.current, name)
                    choices = CHOICES.get(name)
                    yield Label(name.replace("_", " ") + (f" ({', '.join(choices)})" if choices else ""))
                    yield Input(
                        "" if value is None else str(value),
                        id=f"f-{name}",
                        compact=True,
                        suggester=SuggestFromList(choices, case_sensitive=False) if choices else None,
                    )
            yield self.error_line()
            yield Label("Tab moves; Enter or ctrl+s saves; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.unmark()
        self.query_one(f"#f-{SELECTION_FIELDS[0]}", Input).focus()

    def values(self) -> dict[str, edits.SelectionValue]:
        """The form as typed values; FieldError names the first field that is not."""
        raw: dict[str, str] = {}
        for name in SELECTION_FIELDS:
            box = self.query_one(f"#f-{name}", Input)
            choices = CHOICES.get(name)
            if choices:
                box.value = suggested(box.value, choices)
                if box.value and box.value not in choices:
                    raise FieldError(
                        f"f-{name}", f"{name.replace('_', ' ')}: {box.value!r} is not one of {', '.join(choices)}"
                    )
            raw[name] = box.value
        try:
            return edits.parse_selection(raw)
        except nbm.NotebookError as exc:
            name = str(exc).split(":", 1)[0].removeprefix("selection.")
            raise FieldError(f"f-{name}", str(exc).removeprefix("selection.")) from None

    @on(Input.Submitted)
    def action_save(self) -> None:
        try:
            values = self.values()
        except FieldError as exc:
            self.mark(exc.field, str(exc))
            return
        path, seen = app_of(self).notebook_path, self.current
        self.save(lambda: edits.set_selection(path, seen, values), now=lambda: nbm.load(path).selection)

    def conflict(self, now: Any) -> None:
        if isinstance(now, nbm.Selection):
            self.current = now
