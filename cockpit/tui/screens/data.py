"""What reaches the loss: the examples a run's data gate inspected (inspect.json), as ``cockpit inspect`` shows them.

For each example: its split and id (pinned above the scroll), the decoded
text with the supervised spans highlighted (the part the loss counts) and the
masked ones dimmed, the target, and every batch row (input ids, masks,
labels) position by position across the screen, in blocks as wide as the
screen. The head gives the data gate's verdict, its failed and warned
checks, and what cropping to max_length cost. A series run inspects no data:
its variant's pilot is shown, and said to be.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, OptionList, Static
from textual.widgets.option_list import Option

from ... import inspectview as iv
from ... import runs
from ...inspectview import IGNORE, MASKED, SUPERVISED
from ...schema import JSON, Event, InspectDoc, InspectedExample
from .. import style as sty
from ..api import app_of
from ..messages import DataRead
from ..plain import clean_line, one_line, plain
from ..widgets.footer import FittingFooter
from .run import NARROW

# Values from the task are cleaned of control characters and a cell is at most 12 columns.
SCREEN = iv.Layout(
    text=plain,
    cell=one_line,
    key=lambda k: clean_line(k, 24),
    cap=12,
    spare=1,
    gap=0,
    no_decode="(no decode function in the task)",
)


def load_inspect(rdir: Path) -> tuple[InspectDoc | None, str]:
    """The document and, when it cannot be shown, why (in words)."""
    path = Path(rdir) / runs.INSPECT_FILE
    try:
        doc = json.loads(path.read_text("utf-8", errors="replace"))
    except FileNotFoundError:
        return None, f"{path}: no inspected examples; the data gate writes them (this run did not reach or pass it)"
    except (ValueError, RecursionError) as exc:
        return None, f"{path}: not valid JSON ({exc}); the pilot may still be writing it"
    except OSError as exc:
        return None, f"{path}: cannot be read ({exc})"
    if not isinstance(doc, dict) or not isinstance(doc.get("examples"), list):
        return None, f"{path}: no 'examples' list in it"
    return cast(InspectDoc, doc), ""  # inspect.json enters here


def source_run(campaign_dir: Path, run_id: str, all_runs: list[runs.RunFiles]) -> tuple[str, str]:
    """The run whose inspected examples to show for ``run_id``, and a note when it is another run.

    A series (train) run inspects no data; its variant's latest pilot that wrote inspect.json
    (a passed one first) stands for it.
    """
    me = next((r for r in all_runs if r.id == run_id), None)
    if me is None or me.kind == "pilot":
        return run_id, ""
    pilots = [
        r for r in all_runs if r.kind == "pilot" and r.variant == me.variant and (r.dir / runs.INSPECT_FILE).is_file()
    ]
    if not pilots:
        return run_id, f"{run_id} is a series run (it inspects no data) and variant {me.variant} has no pilot that did"
    passed = [r for r in pilots if r.status == "passed"]
    pick = (passed or pilots)[-1]
    return pick.id, f"{run_id} is a series run: the data of variant {me.variant} as its pilot {pick.id} inspected it"


class DataScreen(Screen[None]):
    HELP_SECTION = "Data"
    BINDINGS = [
        Binding("escape,b", "app.pop_screen", "Back", id="back"),
        Binding("m", "app.toggle_maximize", "Max", id="maximize", show=False),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.examples: list[InspectedExample] = []
        self.index = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"{self.run_id}: reading inspect.json ...", style="dim"), id="data-head")
        with Horizontal(id="data-body"):
            yield OptionList(id="examples")
            with Vertical(id="example-side"):
                yield Static(id="example-id")
                with VerticalScroll(id="example-scroll"):
                    yield Static(id="example")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.set_class(self.app.size.width < NARROW, "-narrow")
        self.sub_title = f"{self.run_id} data"
        self.query_one("#examples", OptionList).display = False
        app = app_of(self)
        cdir, cache, rid = app.campaign_dir, app.cache, self.run_id

        def work() -> None:
            try:
                all_runs = [r for p in runs.run_dirs(cdir) if (r := cache.read(p)) is not None]
                source, note = source_run(cdir, rid, all_runs)
                doc, why = load_inspect(runs.run_dir(cdir, source))
                src = next((r for r in all_runs if r.id == source), None)
                gate = src.gate("data") if src is not None else None
            except Exception as exc:  # noqa: BLE001 - said on the screen; the app goes on
                self.post_message(
                    DataRead(None, f"the run's data cannot be read: {type(exc).__name__}: {exc}", "", None)
                )
                return
            self.post_message(DataRead(doc, why or "", note, gate, source))

        self.run_worker(work, thread=True, exclusive=True, group="data", exit_on_error=False, description="read data")

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < NARROW, "-narrow")
        if self.examples:
            self.show(self.index)

    @on(DataRead)
    def data_read(self, message: DataRead) -> None:
        head = self.query_one("#data-head", Static)
        options = self.query_one("#examples", OptionList)
        out = Text()
        if message.source:
            out.append_text(one_line(message.source, style="cyan", limit=300))
            out.append("\n")
        if message.doc is None:
            out.append_text(plain(message.why, style="yellow"))
            head.update(out)
            return
        doc = message.doc
        self.examples = [e for e in doc["examples"] if isinstance(e, dict)]
        out.append(f"{message.run_id or self.run_id}: {len(self.examples)} inspected examples", style="bold")
        counts = doc.get("class_counts") or {}
        if isinstance(counts, dict) and counts:
            out.append_text(one_line("  classes: " + ", ".join(f"{k} {v}" for k, v in counts.items()), limit=200))
        out.append_text(gate_summary(message.gate))
        out.append("\n")
        out.append("supervised", style=SUPERVISED)
        out.append(" spans count in the loss; ", style="dim")
        out.append("dimmed", style=MASKED)
        out.append(f" spans and labels {IGNORE} are ignored", style="dim")
        head.update(out)
        options.display = True
        options.add_options(
            [Option(one_line(f"{e.get('split', '?')} {e.get('id', '?')}", limit=40)) for e in self.examples]
        )
        if self.examples:
            options.highlighted = 0
            self.call_after_refresh(self.show, 0)  # once the list is laid out: the positions fit the width left
        options.focus()

    @on(OptionList.OptionHighlighted, "#examples")
    def highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.show(event.option_index)

    def show(self, index: int) -> None:
        if not 0 <= index < len(self.examples):
            return
        self.index = index
        e = self.examples[index]
        pinned = Text()
        pinned.append_text(one_line(f"{e.get('split', '?')} {e.get('id', '?')}", style="bold", limit=100))
        pinned.append(f"  example {index + 1} of {len(self.examples)}", style="dim")
        self.query_one("#example-id", Static).update(pinned)
        scroll = self.query_one("#example-scroll", VerticalScroll)
        width = scroll.scrollable_content_region.width or (self.app.size.width - 24)
        self.query_one("#example", Static).update(example_view(e, max(20, width - 1)))


def gate_summary(gate: Event | None) -> Text:
    """The data gate's verdict, its checks that did not pass, and what cropping cost (as ``cockpit inspect``)."""
    out = Text()
    if gate is None:
        out.append("\ndata gate: not reached", style="dim")
        return out
    view = sty.gate_view(gate, None)
    out.append("\ndata gate: ", style="bold")
    out.append(view.word, style=view.style)
    for c in gate.get("checks") or []:
        if isinstance(c, dict) and not c.get("ok"):
            result = sty.check_result(c)
            out.append(f"\n  {result} ", style=sty.CHECK_STYLE[result])
            out.append_text(one_line(c.get("name", ""), style="bold", limit=60))
            out.append(": ")
            out.append_text(one_line(c.get("detail", ""), limit=300))
    trunc = gate.get("truncation")
    if isinstance(trunc, dict):
        out.append("\n")
        out.append_text(
            one_line(
                f"cropping to max_length {trunc.get('max_length')}: {trunc.get('lose_target_tokens')} of "
                f"{trunc.get('examples')} train examples lose target tokens, {trunc.get('no_target_left')} keep none",
                style="yellow" if trunc.get("lose_target_tokens") else "",
                limit=300,
            )
        )
    return out


def text_of(e: InspectedExample) -> Text:
    """The decoded text: supervised spans highlighted, masked spans dimmed."""
    return iv.text_of(e, SCREEN)


def example_view(e: InspectedExample, width: int) -> RenderableType:
    body: list[RenderableType] = []
    line = Text()
    line.append("text   ", style="bold")
    line.append_text(text_of(e))
    body.append(line)
    if e.get("target") is not None:
        body.append(Text.assemble(("target ", "bold"), plain(e["target"], style="green")))
    if e.get("generated") is not None:  # a task that generates: the model's text, beside the target
        body.append(Text.assemble(("generated ", "bold"), plain(e["generated"])))
    if e.get("label_name") is not None:
        body.append(Text.assemble(("label  ", "bold"), plain(e["label_name"])))
    raw_row = e.get("row")
    row: Mapping[str, JSON] = raw_row if isinstance(raw_row, dict) else {}
    for k, v in row.items():
        if not isinstance(v, list):
            body.append(Text.assemble(one_line(f"{k} ", style="bold", limit=40), one_line(v, limit=400)))
    blocks = positions(row, width)
    if blocks:
        body.append(Text("\nposition by position", style="bold underline"))
        body.extend(blocks)
    return Group(*body)


def positions(row: Mapping[str, JSON], width: int) -> list[Table]:
    """The batch row position by position, positions across, in blocks that fit ``width`` columns."""
    return iv.positions(row, width, SCREEN)
