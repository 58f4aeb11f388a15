"""Add or edit a variant from the campaign screen (``e``): its id, ``set`` (key = value overrides),
``differs``, ``why`` and ``kind``, saved to campaign.toml through ``edits.save_variant``.

The dialog opens on the selected run's variant (or the reference). Typing another
variant's id loads that variant; a new id adds one, starting from the fields
shown (a copy to change). The dialog checks what it can itself (an id, the
overrides' syntax, the kind); the notebook's own check names a key no section
has or a value out of range, on the field it is about. Once training runs of
the current protocol revision used a variant, its set and kind are fixed.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label

from ... import notebook as nbm
from .. import notebookedits as edits
from ..api import app_of
from .dialogs import FieldError, suggested
from .editdialogs import EditDialog

KINDS = ("quality", "memory")
WORDS = ("differs", "why")


class VariantScreen(EditDialog):
    BINDINGS = [Binding("ctrl+s", "save", "Save", id="save")]

    def __init__(self, variants: list[nbm.Variant], chosen: str) -> None:
        super().__init__()
        self.variants = {v.id: v for v in variants}
        self.seen: nbm.Variant | None = self.variants.get(chosen)  # None: a new variant

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide", id="variant-dialog"):
            yield Label("", id="variant-title", classes="title")
            with VerticalScroll(id="fields"):
                yield Label("id (another variant's id edits it; a new one adds a variant)")
                yield Input(id="id", compact=True, suggester=SuggestFromList(list(self.variants)))
                yield Label(Text("set: key = value, ... (overrides of [training], [batch] or [task.params])"))
                yield Input(id="set", compact=True, placeholder="lr = 5e-5, microbatch = 4")
                yield Label("differs: what differs from the reference, in words")
                yield Input(id="differs", compact=True)
                yield Label("why: what it should tell")
                yield Input(id="why", compact=True)
                yield Label("kind (quality: trained in the series; memory: compared by its pilot)")
                yield Input(id="kind", compact=True, suggester=SuggestFromList(KINDS))
            yield self.error_line()
            yield Label("Tab moves; Enter or ctrl+s saves to campaign.toml; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.unmark()
        if self.seen is not None:
            self.fill(self.seen)
        self.show_title()
        self.query_one("#id", Input).focus()

    def fill(self, v: nbm.Variant) -> None:
        with self.prevent(Input.Changed):
            self.query_one("#id", Input).value = v.id
            self.query_one("#set", Input).value = edits.shown_set(v.set)
            for name in WORDS:
                self.query_one(f"#{name}", Input).value = getattr(v, name)
            self.query_one("#kind", Input).value = v.kind

    def show_title(self) -> None:
        typed = self.query_one("#id", Input).value.strip()
        if self.seen is None:
            title = f"New variant {typed}".rstrip()
        else:
            title = f"Variant {self.seen.id}" + (" (the reference)" if self.seen.reference else "")
        self.query_one("#variant-title", Label).update(title)

    @on(Input.Changed, "#id")
    def id_changed(self, event: Input.Changed) -> None:
        typed = event.value.strip()
        if typed in self.variants and (self.seen is None or typed != self.seen.id):
            self.seen = self.variants[typed]
            self.fill(self.seen)
        elif typed not in self.variants:
            self.seen = None  # a new id: a new variant, from the fields shown (a variant is never renamed here)
        self.show_title()

    def variant(self) -> nbm.Variant:
        """The form as a variant; FieldError names the first field the dialog can tell is wrong."""
        vid = self.query_one("#id", Input).value.strip()
        if not vid:
            raise FieldError("id", "id: give the variant a short id, e.g. lr3e-4")
        if re.search(r"\s", vid):
            raise FieldError("id", f"id: {vid!r} has a space; an id is one word, e.g. lr3e-4")
        try:
            values = edits.parse_set(self.query_one("#set", Input).value)
        except nbm.NotebookError as exc:
            raise FieldError("set", str(exc)) from None
        box = self.query_one("#kind", Input)
        box.value = kind = suggested(box.value, KINDS) or "quality"
        if kind not in KINDS:
            raise FieldError("kind", f"kind: {kind!r} is not one of {', '.join(KINDS)}")
        differs, why = (self.query_one(f"#{name}", Input).value.strip() for name in WORDS)
        return nbm.Variant(id=vid, set=values, kind=kind, differs=differs, why=why)

    @on(Input.Submitted)
    def action_save(self) -> None:
        try:
            new = self.variant()
        except FieldError as exc:
            self.mark(exc.field, str(exc))
            return
        if self.seen is not None:
            new = dataclasses.replace(new, reference=self.seen.reference)
        path, seen = app_of(self).notebook_path, self.seen
        self.save(lambda: edits.save_variant(path, seen, new), now=lambda: _on_disk(path, seen.id if seen else new.id))

    def field_for(self, path: str) -> str | None:
        m = re.match(r"variants\[\d+\]\.(\w+)", path)
        return m.group(1) if m and m.group(1) in ("id", "set", "kind", *WORDS) else None

    def conflict(self, now: Any) -> None:
        """The variant as the file has it now is the one edited from here (Enter again saves over it)."""
        if isinstance(now, nbm.Variant):
            self.seen = now
            self.variants[now.id] = now
        self.show_title()


def _on_disk(path: Any, vid: str) -> nbm.Variant | None:
    return next((v for v in nbm.load(path).variants if v.id == vid), None)
