"""The dialog that starts a series: variants x seeds, how many at once, and the series' guard.

It is the largest dialog, so it has a module of its own. The guard runs in the
dialog, before it closes: a refused series is refused here with its reasons,
and the override field starts it anyway, its text recorded as a decision and
in each run's row, as ``--without-pilot`` and ``--again`` do for ``cockpit series``.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, SelectionList, Static
from textual.widgets.selection_list import Selection

from ... import notebook as nbm
from ..plain import one_line, plain
from ..seriesctl import SeriesChoice
from ..widgets.checks import CheckList
from .dialogs import Dialog, FieldError


def pilot_key() -> str:
    """The key that starts a pilot, read from the campaign screen's own binding, so these words cannot drift."""
    from .campaign import CampaignScreen

    binding = next(b for b in CampaignScreen.BINDINGS if isinstance(b, Binding) and b.id == "pilot")
    return binding.key_display or binding.key


def refusal(exc: Exception) -> str:
    """The series guard's refusal for the dialog: each reason in a few words, then the way out."""
    reasons = getattr(exc, "reasons", None)
    if not reasons:
        return str(exc)
    return (
        "refused: " + "; ".join(reasons) + f". To pilot first: Escape, then {pilot_key()} on the campaign screen; "
        "to start anyway, say why in override (recorded as a decision and in each run's row)"
    )


def _role(v: nbm.Variant) -> str:
    role = nbm.role_words(v)
    return f": {role}" if role else ""


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
            yield CheckList[str](
                *[
                    Selection(one_line(f"{v.id}  {v.kind}" + _role(v), limit=56), v.id, v.id in self.chosen)
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
        self.dismiss(SeriesChoice(items, parallel, updates, decisions, variants, seeds, why))
