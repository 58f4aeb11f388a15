"""Every field of every event a real run wrote is a field of the schema (``schema.Event``)."""

from __future__ import annotations

from pathlib import Path

from cockpit import events as ev


def off_schema(rdir: Path) -> list[tuple[str, list[str]]]:
    """The events of a run folder that carry a field the schema lacks: (kind, those fields)."""
    out = []
    for e in ev.read_events(Path(rdir) / ev.EVENTS_FILE):
        extra = set(e) - ev.EVENT_FIELDS
        if extra:
            out.append((e["kind"], sorted(extra)))
    return out
