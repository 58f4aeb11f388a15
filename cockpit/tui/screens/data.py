"""What reaches the loss: the examples a run's data gate inspected (inspect.json).

For each example: its split and id, the decoded text with the supervised
spans highlighted (the part the loss counts), the target, and every batch
row (input ids, masks, labels) aligned position by position.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, OptionList, Static

from ... import runs
from ..api import app_of

SUPERVISED = "bold black on green"


def load_inspect(rdir: Path) -> tuple[dict[str, Any] | None, str]:
    """The document and, when it cannot be shown, why (in words)."""
    path = Path(rdir) / runs.INSPECT_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None, f"{path}: no inspected examples; the data gate writes them (this run did not reach or pass it)"
    except ValueError as exc:
        return None, f"{path}: not valid JSON ({exc}); the pilot may still be writing it"
    if not isinstance(doc, dict) or not isinstance(doc.get("examples"), list):
        return None, f"{path}: no 'examples' list in it"
    return doc, ""


class DataScreen(Screen[None]):
    BINDINGS = [Binding("escape,b", "app.pop_screen", "Back", id="back")]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.examples: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="data-head")
        with Horizontal(id="data-body"):
            yield OptionList(id="examples")
            with VerticalScroll(id="example-scroll"):
                yield Static(id="example")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"{self.run_id} data"
        doc, why = load_inspect(runs.run_dir(app_of(self).campaign_dir, self.run_id))
        head = self.query_one("#data-head", Static)
        options = self.query_one("#examples", OptionList)
        if doc is None:
            head.update(Text(why, style="yellow"))
            options.display = False
            return
        self.examples = [e for e in doc["examples"] if isinstance(e, dict)]
        out = Text(f"{self.run_id}: {len(self.examples)} inspected examples", style="bold")
        counts = doc.get("class_counts") or {}
        if counts:
            out.append("  classes: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        out.append("\nsupervised span", style=SUPERVISED)
        out.append(" = what the loss counts", style="dim")
        head.update(out)
        options.add_options([f"{e.get('split', '?')} {e.get('id', '?')}" for e in self.examples])
        if self.examples:
            options.highlighted = 0
            self.show(0)
        options.focus()

    @on(OptionList.OptionHighlighted, "#examples")
    def highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.show(event.option_index)

    def show(self, index: int) -> None:
        if 0 <= index < len(self.examples):
            self.query_one("#example", Static).update(example_text(self.examples[index]))


def example_text(e: dict[str, Any]) -> Text:
    out = Text(f"{e.get('split', '?')} {e.get('id', '?')}", style="bold")
    text = e.get("text")
    out.append("\ntext   ", style="bold")
    if isinstance(text, list):
        for span in text:
            if isinstance(span, (list, tuple)) and len(span) == 2:
                out.append(str(span[0]), style=SUPERVISED if span[1] else "")
            else:
                out.append(str(span))
    elif text is not None:
        out.append(str(text))
    else:
        out.append("(no decode function in the task)", style="dim")
    if e.get("target") is not None:
        out.append("\ntarget ", style="bold")
        out.append(str(e["target"]))
    if e.get("label_name") is not None:
        out.append("\nlabel  ", style="bold")
        out.append(str(e["label_name"]))
    row = e.get("row") or {}
    lists = {k: v for k, v in row.items() if isinstance(v, list)}
    for k, v in row.items():
        if k not in lists:
            out.append(f"\n{k} ", style="bold")
            out.append(str(v))
    if lists:
        out.append("\n\nposition by position", style="bold underline")
        out.append_text(aligned(lists))
    return out


def aligned(lists: dict[str, list[Any]]) -> Text:
    """One line per position: a value per key, padded, with ignored labels dimmed."""
    keys = list(lists)
    widths = {k: max([len(k)] + [len(str(x)) for x in lists[k]]) for k in keys}
    out = Text("\n  #  " + "  ".join(k.rjust(widths[k]) for k in keys), style="dim")
    length = max(len(v) for v in lists.values())
    for i in range(length):
        out.append(f"\n{i:>3}  ", style="dim")
        for j, k in enumerate(keys):
            v = lists[k][i] if i < len(lists[k]) else ""
            style = "dim" if v in (-100, 0) and ("label" in k or "mask" in k) else ""
            if "label" in k and v not in (-100, ""):
                style = "green"
            out.append(("  " if j else "") + str(v).rjust(widths[k]), style=style)
    return out
