"""The help screen: what each screen shows and its keys."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = (
    (
        "Everywhere",
        (
            ("?", "this help"),
            ("ctrl+p", "command palette: every main action by name"),
            ("q", "quit Cockpit (running pilots keep running; it says which)"),
            ("Escape / b", "back"),
            ("m", "maximise the focused pane (Tab moves between panes); m or Escape restores"),
        ),
    ),
    (
        "Campaign",
        (
            ("arrows, Enter", "choose a run and open it (live if it is running)"),
            ("Home / End", "first / last run"),
            ("/", "filter: variant:ID status:failed seed:0-2 kind:train or any text; Escape clears"),
            ("t / T", "sort by the next column (run, variant, seed, status, peak, time, verdict) / reverse"),
            ("n / f", "next running run / next failed, diverged or crashed run"),
            ("p", "start a pilot: pick variant and seed"),
            ("S", "start a series: variants x seeds, each a training run"),
            ("C", "compare variants: tables and loss curves"),
            ("d / o", "add a decision / an observation, linked to the selected run"),
            ("v", "set the selected run's verdict"),
            ("e", "edit the selected run's variant (set, differs, why, kind); a new id adds a variant"),
            ("c / s", "edit the conclusion / the selection sheet"),
            ("i", "data view: the selected run's inspected examples"),
            ("g", "GPUs: NVML memory, utilisation, power, temperature, processes"),
            ("r", "reload campaign.toml"),
        ),
    ),
    (
        "Run",
        (
            ("arrows, Enter", "choose a gate and show its checks, memory and remedy"),
            ("x", "stop the pilot or run (asks first; SIGTERM, then SIGKILL after 10 s)"),
            ("i", "data view"),
        ),
    ),
    ("Series run", (("x / i", "stop it / data view (its variant's pilot); no gates: loss by update, validation"),)),
    (
        "Compare",
        (
            ("t / l", "tables (as `cockpit compare`) / loss curves of chosen runs"),
            ("space, a, n", "choose the run under the cursor / all / none"),
            ("z", "zoom the curves to the runs that did not diverge"),
            ("c", "a colour per variant (markers per run) or per run"),
            ("s / y", "smooth the curves / loss on a log scale"),
            ("o", "open the run under the cursor"),
        ),
    ),
    ("Data", (("arrows", "choose an example; its batch row is shown position by position"),)),
)

NOTES = (
    "Every edit is written to campaign.toml at once. If the file changed on disk meanwhile "
    "(the CLI, a pilot), Cockpit shows the change and saves nothing over it.\n"
    "Memory: NVML used includes the CUDA context that torch never reports; the bar next to "
    "each gate is its peak against the GPU's capacity, the tallest one marked."
)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "Close", id="close")]

    def __init__(self, section: str = "") -> None:
        super().__init__()
        self.section = section

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog wide", id="help"):
            yield Static(help_view(self.section))


def help_text(section: str = "") -> Text:
    """Every key; the screen's own section first (what ? was pressed on), then the rest."""
    out = Text()
    out.append("Cockpit", style="bold")
    out.append("  pilot every phase of a training campaign before paying for it", style="dim")
    order = sorted(HELP, key=lambda s: (s[0] != section, s[0] != "Everywhere"))
    for name, keys in order:
        out.append(f"\n\n{name}", style="bold underline")
        if name == section:
            out.append("  (this screen)", style="dim")
        for key, what in keys:
            out.append(f"\n {key:<14}", style="bold cyan")
            out.append(what)
    out.append(f"\n\n{NOTES}", style="dim")
    return out


def help_view(section: str = "") -> RenderableType:
    """:func:`help_text` laid out for the screen: keys in their own column, so a description that wraps
    keeps its hanging indent (at 80x24 it wrapped to the left edge, under the keys)."""
    parts: list[RenderableType] = [
        Text.assemble(("Cockpit", "bold"), ("  pilot every phase of a training campaign before paying for it", "dim"))
    ]
    order = sorted(HELP, key=lambda s: (s[0] != section, s[0] != "Everywhere"))
    for name, keys in order:
        head = Text(f"\n{name}", style="bold underline")
        if name == section:
            head.append("  (this screen)", style="dim")
        parts.append(head)
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, min_width=15, style="bold cyan")
        grid.add_column(ratio=1, overflow="fold")
        for key, what in keys:
            grid.add_row(f" {key}", what)
        parts.append(grid)
    parts.append(Text(f"\n{NOTES}", style="dim"))
    return Group(*parts)
