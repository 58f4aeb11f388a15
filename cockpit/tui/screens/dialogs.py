"""Modal dialogs: confirm, start a pilot or a series, notes, verdict, conclusion, selection, gate detail.

Every dialog works from the keyboard alone: Enter accepts (ctrl+s in the
multi-field ones), Escape cancels, Tab moves between fields.
"""

from __future__ import annotations

import json

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, OptionList, SelectionList, Static, TextArea
from textual.widgets.selection_list import Selection

from ... import notebook as nbm
from .. import format as fm
from .. import style as sty
from ..ingest import gate_peak
from ..notes import SELECTION_FIELDS


class Dialog(ModalScreen):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="cancel")]

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(Dialog):
    BINDINGS = [
        Binding("y", "yes", "Yes", id="yes"),
        Binding("n,escape", "cancel", "No", id="no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question")
            yield Label("y: yes    n or Escape: no", classes="hint")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class StartPilotScreen(Dialog):
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
            options = OptionList(*self.variants, id="variant")
            yield options
            yield Label("seed")
            yield Input("0", id="seed", type="integer", compact=True)
            yield Label("Enter on the seed starts; Escape cancels", classes="hint")

    def on_mount(self) -> None:
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
            self.notify(f"seed {raw!r} is not a whole number", severity="error")
            return
        index = options.highlighted if options.highlighted is not None else 0
        self.dismiss((self.variants[index], seed))


class StartSeriesScreen(Dialog):
    """Choose variants (space) and seeds; Enter starts one train run per variant x seed."""

    BINDINGS = [Binding("ctrl+s", "start", "Start", id="start")]

    def __init__(self, nb: nbm.Notebook, chosen: list[str]) -> None:
        super().__init__()
        self.nb = nb
        self.chosen = chosen

    def compose(self) -> ComposeResult:
        nb = self.nb
        with Vertical(classes="dialog", id="series-dialog"):
            yield Label("Start a series: each variant x seed a full training run", classes="title")
            yield Label("variants (space chooses, arrows move)")
            yield SelectionList[str](
                *[Selection(f"{v.id}  {v.kind}: {v.differs}"[:56], v.id, v.id in self.chosen) for v in nb.variants],
                id="series-variants",
            )
            with Horizontal(classes="field"):
                yield Label("seeds", classes="name")
                yield Input("0,1,2", id="series-seeds", compact=True)
            with Horizontal(classes="field"):
                yield Label("at once", classes="name")
                yield Input("1", id="series-parallel", type="integer", compact=True)
            with Horizontal(classes="field"):
                yield Label("updates", classes="name")
                yield Input("", id="series-updates", type="integer", compact=True)
            yield Static(id="series-plan", classes="hint")
            yield Label("Enter in a field or ctrl+s starts; Tab moves; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.query_one("#series-variants", SelectionList).focus()
        self.show_plan()

    @on(SelectionList.SelectedChanged)
    @on(Input.Changed)
    def show_plan(self) -> None:
        text = Text()
        try:
            variants, seeds, parallel, updates = self.choice()
        except ValueError as exc:
            text.append(str(exc), style="bold red")
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
        self.query_one("#series-plan", Static).update(text)

    def choice(self) -> tuple[list[str], list[int], int, int | None]:
        """The chosen series, or ValueError with what to fix."""
        from ... import series as sr
        from ...errors import CockpitError

        variants = list(self.query_one("#series-variants", SelectionList).selected)
        if not variants:
            raise ValueError("choose at least one variant (space)")
        try:
            seeds = sr.parse_seeds(self.query_one("#series-seeds", Input).value)
        except CockpitError as exc:
            raise ValueError(str(exc).replace("--seeds", "seeds")) from None
        raw = self.query_one("#series-parallel", Input).value.strip() or "1"
        parallel = int(raw) if raw.lstrip("-").isdigit() else 0
        if parallel < 1:
            raise ValueError("at once: a whole number >= 1")
        raw = self.query_one("#series-updates", Input).value.strip()
        updates = int(raw) if raw.lstrip("-").isdigit() else None
        if raw and (updates is None or updates < 1):
            raise ValueError("updates: a whole number >= 1, or empty for the notebook's budget")
        return variants, seeds, parallel, updates

    @on(Input.Submitted)
    def action_start(self) -> None:
        try:
            choice = self.choice()
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.dismiss(choice)


class NoteScreen(Dialog):
    """A decision or an observation, linked to runs."""

    def __init__(self, kind: str, run_ids: list[str]) -> None:
        super().__init__()
        self.kind = kind
        self.run_ids = run_ids

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"New {self.kind}", classes="title")
            yield Input(placeholder=f"the {self.kind}, in one sentence", id="text", compact=True)
            yield Label("linked runs (comma separated)")
            yield Input(", ".join(self.run_ids), id="runs", compact=True)
            yield Label("Enter saves to campaign.toml at once; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.query_one("#text", Input).focus()

    @on(Input.Submitted)
    def submitted(self) -> None:
        text = self.query_one("#text", Input).value.strip()
        if not text:
            self.notify(f"write the {self.kind} first", severity="warning")
            self.query_one("#text", Input).focus()
            return
        raw = self.query_one("#runs", Input).value
        self.dismiss((text, [r.strip() for r in raw.replace(" ", ",").split(",") if r.strip()]))


class VerdictScreen(Dialog):
    def __init__(self, run_id: str, current: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Verdict on {self.run_id}", classes="title")
            suggest = SuggestFromList(["keep", "reject", "rerun", "inconclusive"], case_sensitive=False)
            yield Input(
                self.current,
                id="verdict",
                suggester=suggest,
                compact=True,
                placeholder="keep, reject, rerun, inconclusive or your words",
            )
            yield Label("Enter saves; Escape cancels", classes="hint")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)


class ConclusionScreen(Dialog):
    BINDINGS = [Binding("ctrl+s", "save", "Save", id="save")]

    def __init__(self, current: nbm.Conclusion, variants: list[str]) -> None:
        super().__init__()
        self.current = current
        self.variants = variants

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label("Conclusion", classes="title")
            yield TextArea(self.current.text, id="text", soft_wrap=True, show_line_numbers=False)
            yield Label(f"chosen variant ({', '.join(self.variants)} or empty)")
            yield Input(
                self.current.chosen_variant, id="chosen", compact=True, suggester=SuggestFromList(self.variants)
            )
            yield Label("ctrl+s saves; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.query_one("#text", TextArea).focus()

    @on(Input.Submitted)
    def action_save(self) -> None:
        self.dismiss((self.query_one("#text", TextArea).text, self.query_one("#chosen", Input).value.strip()))


class SelectionScreen(Dialog):
    BINDINGS = [Binding("ctrl+s", "save", "Save", id="save")]

    def __init__(self, current: nbm.Selection) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label("Selection sheet", classes="title")
            with VerticalScroll(id="fields"):
                for name in SELECTION_FIELDS:
                    value = getattr(self.current, name)
                    yield Label(name.replace("_", " "))
                    yield Input("" if value is None else str(value), id=f"f-{name}", compact=True)
            yield Label("Tab moves; Enter or ctrl+s saves; Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.query_one(f"#f-{SELECTION_FIELDS[0]}", Input).focus()

    @on(Input.Submitted)
    def action_save(self) -> None:
        self.dismiss({name: self.query_one(f"#f-{name}", Input).value for name in SELECTION_FIELDS})


class GateScreen(Dialog):
    """One gate in full: checks, inputs, memory, remedy."""

    BINDINGS = [Binding("escape,enter,q", "cancel", "Close", id="close")]

    def __init__(self, phase: str, gate: dict | None) -> None:
        super().__init__()
        self.phase = phase
        self.gate = gate

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog wide"):
            yield Static(gate_text(self.phase, self.gate))


def gate_text(phase: str, gate: dict | None) -> Text:
    out = Text(f"Gate {phase}  ", style="bold")
    if gate is None:
        out.append("not reached yet", style="dim")
        return out
    out.append_text(sty.verdict_text(gate.get("verdict")))
    secs = gate.get("duration_s")
    if isinstance(secs, (int, float)):
        out.append(f"  {secs:.2f} s")
    for check in gate.get("checks") or []:
        ok = check.get("ok")
        mark, style = (
            ("ok  ", "green") if ok and not check.get("warn") else (("warn", "yellow") if ok else ("FAIL", "bold red"))
        )
        out.append(f"\n {mark} ", style=style)
        out.append(str(check.get("name", "")), style="bold")
        if check.get("detail"):
            out.append(f": {check['detail']}")
    if gate.get("inputs"):
        out.append("\ninputs ", style="bold")
        out.append(json.dumps(gate["inputs"]))
    mem = gate.get("mem") or {}
    peak, counter = gate_peak(gate)
    out.append("\nmemory ", style="bold")
    out.append(f"peak {fm.mib(peak)} ({counter or 'not measured'})")
    torch = mem.get("torch")
    if torch:
        out.append(
            f"\n torch allocated {fm.mib(torch.get('allocated'))}, reserved {fm.mib(torch.get('reserved'))}, "
            f"peak allocated {fm.mib(torch.get('peak_allocated'))}"
        )
    for g in mem.get("nvml") or []:
        out.append(
            f"\n GPU {g.get('index')} {g.get('name', '')}: NVML used {fm.mib(g.get('used'))} "
            f"of {fm.mib(g.get('total'))}"
        )
    if mem.get("rss") is not None:
        out.append(f"\n process RSS {fm.mib(mem.get('rss'))}, peak {fm.mib(mem.get('rss_peak'))}")
    if gate.get("remedy"):
        out.append("\nremedy ", style="bold yellow")
        out.append(str(gate["remedy"]))
    if gate.get("message") and gate.get("message") != gate.get("remedy"):
        out.append(f"\n{gate['message']}", style="dim")
    return out
