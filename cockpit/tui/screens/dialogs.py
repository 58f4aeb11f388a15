"""Modal dialogs: confirm, start a pilot or a series, notes, verdict, conclusion, selection, gate detail.

Every dialog works from the keyboard alone: Enter accepts (ctrl+s in the
multi-field ones), Escape cancels, Tab moves between fields.

A dialog never loses what was typed. It checks the fields itself first
(allowed values are offered as suggestions and named in the message); an
edit dialog then saves in a worker and stays open until the notebook says it
is saved. A value the notebook refuses marks its field, keeps the text and
says what is allowed; a field changed on disk meanwhile is shown with the
file's value, and Enter then saves over it knowingly. Notifications wait
while a dialog is open (``DEFERS_TOASTS``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, OptionList, SelectionList, Static, TextArea
from textual.widgets.option_list import Option
from textual.widgets.selection_list import Selection

from ... import notebook as nbm
from .. import format as fm
from .. import notes
from .. import style as sty
from ..api import app_of
from ..ingest import gate_peak
from ..notes import SELECTION_FIELDS, Saved
from ..plain import one_line, plain
from ..seriesctl import SeriesChoice

T = TypeVar("T")

VERDICTS = ("keep", "reject", "rerun", "inconclusive")
CHOICES = {"precision": nbm.PRECISIONS, "strategy": nbm.STRATEGIES}


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
        field = next((f for key, f in self.FIELDS.items() if path.startswith(key)), None)
        where = path.rsplit(".", 1)[-1] if path else ""
        self.mark(field, f"not saved: {where + ': ' if where else ''}{problem}")

    def conflict(self, now: Any) -> None:
        """The file's value is the one seen from now on (a second Enter saves over it knowingly)."""


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


def refusal(exc: Exception) -> str:
    """The series guard's refusal for the dialog: each reason in a few words, then the way out."""
    reasons = getattr(exc, "reasons", None)
    if not reasons:
        return str(exc)
    return (
        "refused: " + "; ".join(reasons) + ". P starts a pilot; to start anyway, say why in override "
        "(recorded as a decision and in each run's row)"
    )


class StartSeriesScreen(Dialog["SeriesChoice"]):
    """Choose variants (space) and seeds; Enter starts one train run per variant x seed.

    The series' guard runs here, before the dialog closes: a variant without a passed pilot
    of these settings and task code, a configuration that already failed, a protocol changed
    after runs or a disk too small refuses the series in the dialog, with the reasons. The
    override field starts it anyway, and its text is recorded as a decision and in each run's row.
    """

    BINDINGS = [Binding("ctrl+s", "start", "Start", id="start")]

    def __init__(self, nb: nbm.Notebook, chosen: list[str]) -> None:
        super().__init__()
        self.nb = nb
        self.chosen = chosen

    def compose(self) -> ComposeResult:
        nb = self.nb
        with VerticalScroll(classes="dialog", id="series-dialog"):  # the guard's reasons may be long
            yield Label("Start a series: each variant x seed a full training run", classes="title")
            yield Label("variants (space chooses, arrows move)")
            yield SelectionList[str](
                *[
                    Selection(one_line(f"{v.id}  {v.kind}: {v.differs}", limit=56), v.id, v.id in self.chosen)
                    for v in nb.variants
                ],
                id="series-variants",
            )
            with Horizontal(classes="field"):
                yield Label("seeds", classes="name")
                yield Input("0,1,2", id="series-seeds", compact=True)
            with Horizontal(classes="field"):
                yield Label("at once", classes="name")
                yield Input("1", id="series-parallel", compact=True)
            with Horizontal(classes="field"):
                yield Label("updates", classes="name")
                yield Input("", id="series-updates", compact=True)
            with Horizontal(classes="field"):
                yield Label("override", classes="name")
                yield Input(
                    "",
                    placeholder="why start despite a refusal (recorded)",
                    id="series-override",
                    compact=True,
                )
            yield Static(id="series-plan", classes="hint")
            yield self.error_line()
            yield Label("Enter or ctrl+s starts; Tab moves; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.unmark()
        self.query_one("#series-variants", SelectionList).focus()
        self.show_plan()

    @on(SelectionList.SelectedChanged)
    @on(Input.Changed)
    def show_plan(self) -> None:
        text = Text()
        try:
            variants, seeds, parallel, updates = self.choice()
        except FieldError as exc:
            text.append_text(plain(str(exc), style="bold red"))
        else:
            from ... import series as sr

            items, _ = sr.plan(self.nb, variants, seeds, overrides=sr.budget_overrides(updates))
            follows = sum(1 for i in items if i.follows)
            text.append(f"{len(items)} runs", style="bold")
            text.append(f" ({len(variants)} variants x {len(seeds)} seeds), {parallel} at a time, ")
            if updates:
                text.append(f"{updates} updates each: a quick look, kept apart by compare", style="yellow")
            else:
                b = self.nb.batch
                budget = b.updates or b.epochs or b.examples
                text.append(
                    f"the notebook's budget ({budget} {self.nb.campaign.held_constant}; "
                    "a number in updates overrides it)"
                )
            if follows:
                text.append(f"; {follows} follow an earlier run of the same variant and seed")
        box = self.query_one("#series-plan", Static)
        box.update(text)
        box.display = True

    def choice(self) -> tuple[list[str], list[int], int, int | None]:
        """The chosen series, or FieldError with the field and what to fix."""
        from ... import series as sr
        from ...errors import CockpitError

        variants = list(self.query_one("#series-variants", SelectionList).selected)
        if not variants:
            raise FieldError("series-variants", "choose at least one variant (space)")
        try:
            seeds = sr.parse_seeds(self.query_one("#series-seeds", Input).value)
        except CockpitError as exc:
            raise FieldError("series-seeds", str(exc).replace("--seeds", "seeds")) from None
        raw = self.query_one("#series-parallel", Input).value.strip() or "1"
        parallel = int(raw) if raw.lstrip("-").isdigit() else 0
        if parallel < 1:
            raise FieldError("series-parallel", f"at once: {raw!r} is not a whole number >= 1")
        raw = self.query_one("#series-updates", Input).value.strip()
        updates = int(raw) if raw.lstrip("-").isdigit() else None
        if raw and (updates is None or updates < 1):
            raise FieldError(
                "series-updates",
                f"updates: {raw!r} is not a whole number >= 1; leave it empty for the notebook's budget",
            )
        return variants, seeds, parallel, updates

    @on(Input.Submitted)
    def action_start(self) -> None:
        from ... import series as sr
        from ...errors import CockpitError

        try:
            variants, seeds, parallel, updates = self.choice()
        except FieldError as exc:
            self.mark(exc.field, str(exc))
            return
        why = self.query_one("#series-override", Input).value.strip() or None
        try:
            items, _ = sr.plan(self.nb, variants, seeds, overrides=sr.budget_overrides(updates))
            decisions = sr.guard(self.nb, items, without_pilot=why, again=why, parallel=parallel) if items else []
        except CockpitError as exc:
            self.query_one("#series-plan", Static).display = False  # room for the reasons at 80x24
            self.mark("series-override", refusal(exc))
            self.query_one("#series-dialog", VerticalScroll).scroll_end(animate=False)
            return
        self.dismiss(SeriesChoice(items, parallel, updates, decisions))


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
        self.save(lambda: notes.add_note(path, digest, kind, text, linked))


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
        self.save(lambda: notes.set_verdict(path, rid, seen, verdict), now=lambda: nbm.load(path).run(rid).verdict)

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
        self.save(lambda: notes.set_conclusion(path, seen, text, chosen), now=lambda: nbm.load(path).conclusion)

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

    def values(self) -> dict[str, Any]:
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
            return notes.parse_selection(raw)
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
        self.save(lambda: notes.set_selection(path, seen, values), now=lambda: nbm.load(path).selection)

    def conflict(self, now: Any) -> None:
        if isinstance(now, nbm.Selection):
            self.current = now


class GateScreen(Dialog[None]):
    """One gate in full: checks, inputs, memory, remedy."""

    BINDINGS = [Binding("escape,enter,q", "cancel", "Close", id="close")]

    def __init__(self, phase: str, gate: dict[str, Any] | None, end: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.phase = phase
        self.gate = gate
        self.end = end

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog wide"):
            yield Static(gate_text(self.phase, self.gate, self.end))


def gate_text(phase: str, gate: dict[str, Any] | None, end: dict[str, Any] | None = None) -> Text:
    """The gate detail, with the CLI's words: each check pass, warn or fail."""
    out = Text()
    out.append_text(one_line(f"Gate {phase}  ", style="bold"))
    if gate is None:
        out.append("not reached yet", style="dim")
        return out
    view = sty.gate_view(gate, end)
    out.append(view.word, style=view.style)
    secs = gate.get("duration_s")
    if isinstance(secs, (int, float)):
        out.append(f"  {secs:.2f} s")
    for check in gate.get("checks") or []:
        if not isinstance(check, dict):
            continue
        result = sty.check_result(check)
        if result == "fail" and check.get("name") == "stopped":
            result = "stopped"
        out.append(f"\n {result:<7} ", style=sty.CHECK_STYLE.get(result, sty.STATUS_STYLE["stopped"]))
        out.append_text(one_line(check.get("name", ""), style="bold"))
        if check.get("detail"):
            out.append(": ")
            out.append_text(plain(check["detail"]))
    if gate.get("inputs"):
        out.append("\ninputs ", style="bold")
        out.append_text(plain(json.dumps(gate["inputs"], default=str)))
    mem = gate.get("mem") or {}
    if not isinstance(mem, dict):
        mem = {}
    peak, counter = gate_peak(gate)
    out.append("\nmemory ", style="bold")
    out.append(f"peak {fm.mib(peak)} ({counter or 'not measured'})")
    torch = mem.get("torch")
    if isinstance(torch, dict):
        out.append(
            f"\n torch allocated {fm.mib(torch.get('allocated'))}, reserved {fm.mib(torch.get('reserved'))}, "
            f"peak allocated {fm.mib(torch.get('peak_allocated'))}"
        )
    for g in mem.get("nvml") or []:
        if isinstance(g, dict):
            out.append("\n")
            out.append_text(
                one_line(
                    f" GPU {g.get('index')} {g.get('name', '')}: NVML used {fm.mib(g.get('used'))} "
                    f"of {fm.mib(g.get('total'))}"
                )
            )
    if mem.get("rss") is not None:
        out.append(f"\n process RSS {fm.mib(mem.get('rss'))}, peak {fm.mib(mem.get('rss_peak'))}")
    if gate.get("busy"):
        out.append("\ntime   ", style="bold")
        out.append_text(
            plain(f"* timed on a busy machine: {gate['busy']}; its time says little about an idle one", style="yellow")
        )
    if gate.get("remedy") and view.remedy:
        out.append("\nremedy ", style="bold yellow")
        out.append_text(plain(gate["remedy"]))
    if gate.get("message") and gate.get("message") != gate.get("remedy"):
        out.append("\n")
        out.append_text(plain(gate["message"], style="dim"))
    if view.word == "stopped":
        out.append("\nstopped by a signal (x, cockpit stop or Ctrl+C): not a failure of this phase", style="dim")
    return out
