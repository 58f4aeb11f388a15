"""Live GPU overview from NVML at about 1 Hz, or a clear "no NVIDIA GPU" state.

Each reading runs in a worker thread; when it arrives the next one is
scheduled with ``set_timer`` (dolphie's re-arming poll), so readings never
overlap and a slow driver slows the panel, not the UI.
"""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from .. import format as fm
from ..api import app_of
from ..device import DeviceSnapshot, MachineFacts
from ..messages import Reading
from ..plain import one_line, plain
from ..widgets.footer import FittingFooter


class DeviceScreen(Screen[None]):
    BINDINGS = [Binding("escape,b,g", "app.pop_screen", "Back", id="back")]

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="device-scroll"):
            yield Static(Text("reading NVML ...", style="dim"), id="device")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.sub_title = "GPUs"
        self.read()

    @work(thread=True, exclusive=True, group="nvml", exit_on_error=False, description="read NVML")
    def read(self) -> None:
        app = app_of(self)
        running = [r.id for r in app.notebook.runs if r.status == "running"]
        src = app.device_source
        self.post_message(Reading(src.read(), src.machine(app.campaign_dir, running)))

    def on_reading(self, message: Reading) -> None:
        text = device_text(message.snapshot, self.size.width, message.machine)
        self.query_one("#device", Static).update(text)
        # the GPUs at about 1 Hz; without one, the disk and the load still change, more slowly
        again = app_of(self).timing.device_s * (1 if message.snapshot.available else 5)
        self.set_timer(again, self.read)


def machine_text(facts: MachineFacts) -> Text:
    """The disk under runs/ and the CPUs' load: what a series and a pilot's timings depend on."""
    out = Text()
    out.append("disk for runs/ ", style="bold")
    if facts.disk_free is None:
        out.append("not readable", style="yellow")
    else:
        out.append(f"{fm.size(facts.disk_free)} free")
        if facts.disk_total:
            out.append(f" of {fm.size(facts.disk_total)}", style="dim")
        out.append("  (`cockpit plan` says what a series needs)", style="dim")
    out.append("\nCPUs ", style="bold")
    out.append(f"{facts.cpus:g} available to Cockpit")
    if facts.load1 is not None:
        busy = facts.load1 > facts.cpus * 0.5
        out.append(f", load {facts.load1:.1f}", style="bold yellow" if busy else "")
        if busy:
            out.append(" busy: a pilot timed now is marked busy", style="yellow")
    return out


def device_text(snap: DeviceSnapshot, width: int = 80, facts: MachineFacts | None = None) -> Text:
    if not snap.available:
        out = Text()
        out.append("no NVIDIA GPU", style="bold yellow")
        out.append("\n")
        out.append_text(plain(snap.error or ""))
        out.append(
            "\n\nPilots still run on the CPU; their memory is the process RSS. "
            "On a GPU box, check `nvidia-smi` and that nvidia-ml-py is installed.",
            style="dim",
        )
        if facts is not None:
            out.append("\n\n")
            out.append_text(machine_text(facts))
        return out
    out = Text()
    if facts is not None:
        out.append_text(machine_text(facts))
        out.append("\n\n")
    out.append(f"{len(snap.gpus)} GPU{'s' if len(snap.gpus) != 1 else ''}", style="bold")
    if snap.driver:
        out.append_text(one_line(f"  driver {snap.driver}", style="dim", limit=60))
    bar_w = max(10, min(40, width - 40))
    for g in snap.gpus:
        out.append(f"\n\nGPU {g.index} ", style="bold")
        out.append_text(one_line(g.name, style="bold cyan", limit=60))
        out.append("\n memory ")
        out.append_text(fm.bar(g.used, g.total, bar_w, style="green"))
        out.append(f" {fm.mib(g.used)} / {fm.mib(g.total)}")
        out.append("\n util   ")
        out.append_text(fm.bar(g.util, 100, bar_w, style="cyan"))
        out.append(f" {g.util}%" if g.util is not None else " not available")
        power = f"{g.power_w:.0f} W" if g.power_w is not None else "not available"
        limit = f" / {g.power_limit_w:.0f} W" if g.power_limit_w is not None else ""
        temp = f"{g.temperature_c} C" if g.temperature_c is not None else "not available"
        out.append(f"\n power  {power}{limit}   temperature {temp}")
        if g.processes:
            own = facts.cockpit_pids if facts is not None else {}
            others = [p for p in g.processes if p.pid not in own]
            for p in g.processes:
                out.append("\n")
                out.append_text(one_line(f"  pid {p.pid:<8} {p.name:<20} {fm.mib(p.used)}", limit=120))
                if p.pid in own:
                    out.append(f"  Cockpit run {own[p.pid]}", style="green")
                else:
                    out.append("  other", style="yellow")
            if others and facts is not None:
                held = sum(p.used or 0 for p in others)
                out.append(
                    f"\n  other processes hold {fm.mib(held)} here: a pilot's NVML figure includes it, "
                    "the sheet sizes from the run's own memory",
                    style="yellow",
                )
        else:
            out.append("\n  no compute processes", style="dim")
    return out
