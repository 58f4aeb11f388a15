"""Units and shared pieces of text: sizes, durations, clocks, bars. Colours of meaning live in ``style``."""

from __future__ import annotations

import datetime as _dt

from rich.text import Text

from ..schema import Event
from .style import status_text

MIB = 2**20


def run_head(run_id: str, start: Event, status: str) -> Text:
    """The start of a run screen's header line: id, variant, seed and status (an unknown is left out, not "?")."""
    out = Text()
    out.append(f"{run_id} ", style="bold")
    known = [str(start["variant"])] if start.get("variant") is not None else []
    known += [f"seed {start['seed']}"] if start.get("seed") is not None else []
    out.append(" ".join(known) + "  " if known else " ")
    if start.get("run_kind") == "probe":  # an unmodified script measured from outside: no data gates
        out.append("probe ", style="bold magenta")
    out.append_text(status_text(status))
    return out


def mib(value: float | None, unit: bool = True) -> str:
    """Bytes as MiB; an unmeasured value is a dash, never 0."""
    if value is None:
        return "-"
    m = value / MIB
    text = f"{m:,.0f}" if m >= 10 else f"{m:.1f}"
    return f"{text} MiB" if unit else text


def size(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10 * 2**30:
        return f"{value / 2**30:.1f} GiB"
    return mib(value)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s"
    h, m = divmod(minutes, 60)
    return f"{h}h{m:02d}m"


def clock(t: float | None) -> str:
    if t is None:
        return "-"
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def bar(value: float | None, capacity: float | None, width: int, style: str = "green") -> Text:
    """A horizontal bar of ``value / capacity`` in eighths of a cell."""
    if value is None or not capacity or width <= 0:
        return Text(" " * width)
    frac = max(0.0, min(1.0, value / capacity))
    eighths = round(frac * width * 8)
    full, part = divmod(eighths, 8)
    filled = ("\u2588" * full + ("" if part == 0 else chr(0x2590 - part)))[:width]
    out = Text(filled, style=style)
    out.append("\u00b7" * (width - len(filled)), style="dim")
    return out


def today() -> str:
    return _dt.date.today().isoformat()
