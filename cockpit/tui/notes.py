"""Notebook edits made from the TUI, each saved at once through ``notebook.mutate``.

The TUI shows a notebook it read a moment ago; meanwhile the CLI or a pilot
may have written the file. ``mutate`` re-reads the newest file under the
lock, and each edit here first checks that the field it replaces still holds
the value the user saw. If it does not, the edit raises ``ConflictError``
and nothing is written: the other change is shown, never overwritten.
Appends (decisions, observations) cannot lose anything, so they merge into
the newer file and say so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import notebook as nbm
from .format import today


@dataclass(frozen=True)
class Saved:
    message: str
    merged: bool  # the file had changed on disk; the edit went into the newer version


def _changed(where: Path, what: str, seen: Any, now: Any, mine: Any) -> nbm.ConflictError:
    return nbm.ConflictError(
        f"{where.name}: {what} changed on disk while you edited it (you saw {seen!r}, the file now says "
        f"{now!r}). Nothing was saved; your text was {mine!r}. The notebook is reloaded: edit it again."
    )


def add_note(path: Path, seen_digest: str | None, kind: str, text: str, run_ids: list[str]) -> Saved:
    text = text.strip()
    if not text:
        raise nbm.NotebookError("an empty note is not saved: write what was decided or observed")
    box: dict[str, bool] = {}

    def change(nb: nbm.Notebook) -> None:
        box["merged"] = nb.digest != seen_digest
        nb.decisions.append(nbm.Decision(date=today(), text=text, kind=kind, runs=list(run_ids)))

    nbm.mutate(path, change)
    linked = f" linked to {', '.join(run_ids)}" if run_ids else ""
    merged = box.get("merged", False)
    tail = " (campaign.toml had changed on disk: added to the newer file)" if merged else ""
    return Saved(f"{kind} saved to {Path(path).name}{linked}{tail}", merged)


def set_verdict(path: Path, run_id: str, seen: str, verdict: str) -> Saved:
    verdict = verdict.strip()

    def change(nb: nbm.Notebook) -> None:
        row = nb.run(run_id)
        if row.verdict != seen:
            raise _changed(Path(path), f"the verdict of {run_id}", seen, row.verdict, verdict)
        row.verdict = verdict

    nbm.mutate(path, change)
    return Saved(f"verdict of {run_id} saved: {verdict or '(cleared)'}", False)


def set_conclusion(path: Path, seen: nbm.Conclusion, text: str, chosen: str) -> Saved:
    def change(nb: nbm.Notebook) -> None:
        now = nb.conclusion
        if (now.text, now.chosen_variant) != (seen.text, seen.chosen_variant):
            raise _changed(Path(path), "the conclusion", seen.text, now.text, text)
        if chosen:
            nb.variant(chosen)  # an unknown variant is a clear error, not a silent string
        nb.conclusion = nbm.Conclusion(text=text.strip(), chosen_variant=chosen, date=today())

    nbm.mutate(path, change)
    return Saved("conclusion saved", False)


SELECTION_FIELDS = tuple(f.name for f in dataclasses.fields(nbm.Selection))


def parse_selection(values: dict[str, str]) -> dict[str, Any]:
    """Text from the form to typed values; raises NotebookError naming the field."""
    hints = {f.name: f.type for f in dataclasses.fields(nbm.Selection)}
    out: dict[str, Any] = {}
    for name, raw in values.items():
        raw = raw.strip()
        kind = str(hints[name])
        try:
            if "float" in kind:
                out[name] = float(raw) if raw else None
            elif "int" in kind:
                out[name] = int(raw) if raw else None
            else:
                out[name] = raw
        except ValueError:
            raise nbm.NotebookError(f"selection.{name}: {raw!r} is not a number") from None
    return out


def set_selection(path: Path, seen: nbm.Selection, values: dict[str, Any]) -> Saved:
    """Save the fields the user changed; each must still hold what the user saw."""
    changed = {k: v for k, v in values.items() if getattr(seen, k) != v}
    if not changed:
        return Saved("selection sheet unchanged", False)

    def change(nb: nbm.Notebook) -> None:
        for name, value in changed.items():
            now = getattr(nb.selection, name)
            if now != getattr(seen, name):
                raise _changed(Path(path), f"selection.{name}", getattr(seen, name), now, value)
            setattr(nb.selection, name, value)

    nbm.mutate(path, change)
    return Saved(f"selection sheet saved: {', '.join(changed)}", False)
