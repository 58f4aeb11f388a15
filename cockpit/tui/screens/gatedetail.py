"""One gate in full, in a dialog: its checks, inputs, memory, timing and remedy.

The words are the CLI's (each check pass, warn or fail, as ``cockpit pilot``
and ``cockpit inspect`` print them), so the TUI and the command line say the
same thing about a phase. ``gate_text`` builds the text apart from the dialog.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...schema import Event
from .. import format as fm
from .. import style as sty
from ..ingest import gate_peak
from ..plain import one_line, plain
from .dialogs import Dialog


class GateScreen(Dialog[None]):
    """One gate in full: checks, inputs, memory, remedy."""

    BINDINGS = [Binding("escape,enter,q", "cancel", "Close", id="close")]

    def __init__(self, phase: str, gate: Event | None, end: Event | None = None) -> None:
        super().__init__()
        self.phase = phase
        self.gate = gate
        self.end = end

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog wide"):
            yield Static(gate_text(self.phase, self.gate, self.end))


def gate_text(phase: str, gate: Event | None, end: Event | None = None) -> Text:
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
    mem: Mapping[str, object] = gate.get("mem") or {}  # a pilot's Mem, or the figures a probe's script reported
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
    nvml = mem.get("nvml")
    for g in nvml if isinstance(nvml, list) else []:
        if isinstance(g, dict):
            out.append("\n")
            out.append_text(
                one_line(
                    f" GPU {g.get('index')} {g.get('name', '')}: NVML used {fm.mib(g.get('used'))} "
                    f"of {fm.mib(g.get('total'))}"
                )
            )
    if mem.get("rss") is not None:
        out.append(f"\n process RSS {fm.mib(_bytes(mem.get('rss')))}, peak {fm.mib(_bytes(mem.get('rss_peak')))}")
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


def _bytes(value: object) -> float | None:
    """A byte count as the gate holds it; None (a dash) for a figure that is not a number."""
    return value if isinstance(value, (int, float)) else None
