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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from .. import notebook as nbm
from ..runs import TomlValue
from .format import today


@dataclass(frozen=True)
class Saved:
    message: str
    merged: bool  # the file had changed on disk; the edit went into the newer version


def _changed(where: Path, what: str, seen: object, now: object, mine: object) -> nbm.ConflictError:
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


SelectionValue: TypeAlias = float | int | str | None  # a field of the selection sheet (nbm.Selection)
SELECTION_FIELDS = tuple(f.name for f in dataclasses.fields(nbm.Selection))


def parse_selection(values: dict[str, str]) -> dict[str, SelectionValue]:
    """Text from the form to typed values; raises NotebookError naming the field."""
    hints = {f.name: f.type for f in dataclasses.fields(nbm.Selection)}
    out: dict[str, SelectionValue] = {}
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


def set_selection(path: Path, seen: nbm.Selection, values: dict[str, SelectionValue]) -> Saved:
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


def parse_set(text: str) -> dict[str, TomlValue]:
    """``lr = 5e-5, microbatch = 4`` as overrides: TOML values, a bare word as text; NotebookError says which."""
    from ..notebook.parse import tomllib  # tomli on Python 3.10

    text = text.strip().strip("{}").strip()
    if not text:
        return {}
    try:
        return dict(tomllib.loads(f"v = {{{text}}}")["v"])
    except tomllib.TOMLDecodeError:
        pass
    out: dict[str, TomlValue] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise nbm.NotebookError(f"set: {part.strip()!r} is not KEY = VALUE (e.g. lr = 5e-5, microbatch = 4)")
        try:
            out[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = value  # a bare word: the text it says (checked against the key's rule on saving)
    return out


def shown_set(values: Mapping[str, TomlValue]) -> str:
    """Overrides as the set field shows them: ``lr = 5e-05, microbatch = 4``."""
    import tomli_w

    return ", ".join(tomli_w.dumps({k: v}).strip() for k, v in values.items())


def trained(nb: nbm.Notebook, variant: str) -> list[str]:
    """The variant's training runs under the campaign's current protocol revision: what its settings are fixed by."""
    from .. import runs

    out = []
    for rdir in runs.run_dirs(nb.directory):
        try:
            frozen = runs.read_run_toml(rdir)
        except (OSError, ValueError):
            continue
        run, rules = frozen.get("run") or {}, frozen.get("protocol") or {}
        revision = rules.get("revision", 1) if isinstance(rules, dict) else 1
        if run.get("kind") == "train" and run.get("variant") == variant and revision == nb.campaign.protocol_revision:
            out.append(str(run.get("id") or rdir.name))
    return out


def save_variant(path: Path, seen: nbm.Variant | None, new: nbm.Variant) -> Saved:
    """Add ``new`` (``seen`` None) or replace the variant ``seen`` by it, under the protocol's rule.

    A variant's ``set`` and ``kind`` are what its training runs ran: once the current protocol revision has
    training runs of it, they are fixed (a run of other settings under the same id would be pooled with them);
    its words (``differs``, ``why``) stay editable. Other settings are a new variant, or a new revision
    (``cockpit protocol``). A variant changed or added on disk meanwhile is a conflict: nothing is written.
    """

    def change(nb: nbm.Notebook) -> None:
        ids = [v.id for v in nb.variants]
        if seen is None:
            if new.id in ids:
                raise _changed(Path(path), f"variant {new.id}", None, "added by someone else", new.id)
            nb.variants.append(new)
            return
        if seen.id not in ids:
            raise _changed(Path(path), f"variant {seen.id}", seen.id, "removed", new.id)
        i = ids.index(seen.id)
        if nb.variants[i] != seen:
            raise _changed(Path(path), f"variant {seen.id}", shown_set(seen.set), shown_set(nb.variants[i].set), new.id)
        if new.id != seen.id and new.id in ids:
            raise nbm.NotebookError(f"{Path(path).name}:\n  - variants[{i}].id: {new.id!r} is another variant's id")
        ran = trained(nb, seen.id) if (new.set, new.kind, new.id) != (seen.set, seen.kind, seen.id) else []
        if ran:
            raise nbm.NotebookError(
                f"{Path(path).name}:\n  - variants[{i}].set: {seen.id} has training runs under protocol revision "
                f"{nb.campaign.protocol_revision} ({', '.join(ran[:4])}{' ...' if len(ran) > 4 else ''}): its id, set "
                "and kind are what they ran. Add a new variant (a new id) for other settings, or declare a new "
                "revision with `cockpit protocol`; differs and why can still change"
            )
        nb.variants[i] = dataclasses.replace(new, reference=seen.reference)

    nbm.mutate(path, change)
    return Saved(f"variant {new.id} {'added' if seen is None else 'saved'} to {Path(path).name}", False)
