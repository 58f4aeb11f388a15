"""Reading ``campaign.toml`` for the TUI: never fatal, and a huge file painted before it is parsed. No textual.

The notebook is read through ``cockpit.notebook`` (the one reader); here the
TUI only decides what to do when it cannot be read, and how to show a file too
large to parse before the first frame:

- a ``campaign.toml`` that exists but cannot be read (a folder there) is
  still the one opened (:func:`notebook_path`), so the app starts and says why;
- any failure (broken TOML, bytes that are not UTF-8, nesting too deep, a
  folder in place of the file, a permission error) becomes :class:`NotebookReading` with
  ``error`` set: a message for the user, never an exception;
- a file above ``SYNC_BYTES`` (1,000 runs is 0.4 MB and a second of parsing;
  200,000 decisions is 24 MB and 35 s) is first read as a *preview*: the same
  file without all but its first ``PREVIEW_RUNS`` run rows and its last
  ``PREVIEW_DECISIONS`` decisions, built leniently for display, which takes
  milliseconds and holds what the first screen shows (the other runs appear
  from their folders). The whole file is then parsed in a worker; until it
  is, nothing is saved from the TUI.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from .. import notebook as nbm

SYNC_BYTES = 200_000  # about 600 run rows: a larger file is first shown from a preview
PREVIEW_DECISIONS = 50
PREVIEW_RUNS = 60


@dataclass
class NotebookReading:
    notebook: nbm.Notebook | None
    error: str = ""
    partial: bool = False  # a preview: run rows and decisions are not all read yet
    decisions: int | None = None  # how many [[decisions]] the file holds (known for a preview)
    runs: int | None = None  # how many [[runs]] it holds (known for a preview)


def describe(exc: BaseException, path: Path) -> str:
    """What went wrong reading the notebook, in words (the notebook's own message when it has one)."""
    if isinstance(exc, nbm.NotebookError):
        return str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return (
            f"{path}: not UTF-8 text (byte {exc.start} is 0x{exc.object[exc.start]:02x}); "
            "a campaign notebook is a TOML text file: restore it from git or rewrite it"
        )
    if isinstance(exc, IsADirectoryError):
        return f"{path}: is a folder, not a file; the campaign notebook must be a TOML file named campaign.toml"
    if isinstance(exc, RecursionError):
        return f"{path}: nested too deeply to read (arrays or tables inside each other); simplify the file"
    if isinstance(exc, PermissionError):
        return f"{path}: cannot be read ({exc.strerror}); check its permissions"
    if isinstance(exc, OSError):
        return f"{path}: cannot be read ({exc.strerror or exc})"
    return f"{path}: cannot be read ({type(exc).__name__}: {exc})"


def notebook_path(campaign: Path | str) -> Path:
    """The notebook's path; one that exists but cannot be read (a folder there) is opened, and says why."""
    try:
        return nbm.find(campaign)
    except nbm.NotebookError:
        p = Path(campaign)
        path = p if p.name == nbm.NOTEBOOK_FILE else p / nbm.NOTEBOOK_FILE
        if not path.exists():
            raise  # nothing here at all: the command says so before any screen
        return path


def read(path: Path) -> NotebookReading:
    """The whole notebook, or why not."""
    if path.is_dir():  # nbm.load would take it for a campaign folder and look inside it
        return NotebookReading(None, describe(IsADirectoryError(21, "Is a directory", str(path)), path))
    try:
        return NotebookReading(nbm.load(path))
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - every failure is shown, never fatal
        return NotebookReading(None, describe(exc, path))


def size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def preview(path: Path, keep: int = PREVIEW_DECISIONS, runs: int = PREVIEW_RUNS) -> NotebookReading:
    """A first look at a large notebook: its sections, its first ``runs`` run rows and its last ``keep``
    decisions, read in milliseconds; or the whole notebook when there is nothing to leave out.

    The preview is for the eyes only (it is built leniently, a value of the wrong type left at its
    default) and never the base of an edit: the whole file is read in a worker at once.
    """
    try:
        raw = path.read_bytes()
    except (Exception, RecursionError) as exc:  # noqa: BLE001
        return NotebookReading(None, describe(exc, path))
    cut, total = _cut(raw, b"\n[[decisions]]", keep, last=True)
    cut, rows = _cut(cut, b"\n[[runs]]", runs, last=False)
    if total <= keep and rows <= runs:
        return read(path)
    try:
        from ..notebook.parse import tomllib  # tomli on Python 3.10

        nb = lenient(tomllib.loads(cut.decode("utf-8")))
    except (Exception, RecursionError):  # noqa: BLE001 - the preview is an optimisation: read it whole
        return read(path)
    nb.path = path
    nb.digest = None  # never a base for a save: the whole file was not read
    return NotebookReading(nb, partial=True, decisions=total, runs=rows)


def _cut(raw: bytes, tag: bytes, keep: int, last: bool) -> tuple[bytes, int]:
    """The file's bytes with all but ``keep`` tables of an array left out (the last or the first ones kept),
    and how many there were.

    A table ends where the next line starting with ``[`` begins. A line of a multi-line string that
    starts with ``[`` would cut a table short; the rest then fails to parse and the caller reads the
    whole file instead.
    """
    found: list[int] = []
    at = raw.find(tag)
    while at >= 0:
        found.append(at)
        at = raw.find(tag, at + len(tag))
    total = len(found)
    if total <= keep:
        return raw, total
    dropped = found[: total - keep] if last else found[keep:]
    parts: list[bytes] = []
    pos = 0
    for at in dropped:
        end = raw.find(b"\n[", at + len(tag))  # the next header, whatever table it opens
        parts.append(raw[pos:at])
        pos = len(raw) if end < 0 else end
    parts.append(raw[pos:])
    return b"".join(parts), total


_SIMPLE = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "None": (type(None),)}


def _fits(value: object, annotation: str) -> bool:
    """Whether a TOML value fits a field's annotation (``int | None``, ``list[str]``, ``dict[str, Any]``...)."""
    for part in (x.strip() for x in annotation.split("|")):
        if part.startswith("list"):
            if isinstance(value, list):
                return True
        elif part.startswith("dict"):
            if isinstance(value, dict):
                return True
        elif part in _SIMPLE:
            kinds = _SIMPLE[part]
            if isinstance(value, kinds) and not (part in ("int", "float") and isinstance(value, bool)):
                return True
        elif part == "Any":
            return True
    return False


def _build(cls: type, data: object) -> object:
    """One section leniently: known keys whose values fit the field's type; the rest left at its default."""
    if not isinstance(data, dict):
        data = {}
    kept = {}
    for f in dataclasses.fields(cls):
        if f.name in data and _fits(data[f.name], str(f.type)):
            kept[f.name] = data[f.name]
    return cls(**kept)


def lenient(data: dict) -> nbm.Notebook:
    """A notebook for display from parsed TOML, without the checks (raises TypeError when a required
    field is missing)."""
    nb = nbm.Notebook(
        campaign=_build(nbm.CampaignInfo, data.get("campaign")),  # type: ignore[arg-type]
        task=_build(nbm.TaskSpec, data.get("task")),  # type: ignore[arg-type]
        batch=_build(nbm.BatchSpec, data.get("batch")),  # type: ignore[arg-type]
        training=_build(nbm.TrainingSpec, data.get("training")),  # type: ignore[arg-type]
    )
    arrays: tuple[tuple[str, type], ...] = (
        ("variants", nbm.Variant),
        ("runs", nbm.RunRow),
        ("decisions", nbm.Decision),
    )
    for name, cls in arrays:
        items = data.get(name)
        if isinstance(items, list):
            setattr(nb, name, [_build(cls, x) for x in items if isinstance(x, dict)])
    tables: tuple[tuple[str, type], ...] = (
        ("stop", nbm.StopRules),
        ("validation", nbm.ValidationSpec),
        ("pilot", nbm.PilotSpec),
        ("selection", nbm.Selection),
        ("rental", nbm.Rental),
        ("conclusion", nbm.Conclusion),
    )
    for name, section in tables:
        if name in data:
            setattr(nb, name, _build(section, data[name]))
    if not nb.variants:
        raise TypeError("no variant")
    return nb


def placeholder(path: Path) -> nbm.Notebook:
    """A notebook with nothing in it, shown while the real one cannot be read."""
    nb = nbm.Notebook(
        campaign=nbm.CampaignInfo(name=path.parent.name),
        task=nbm.TaskSpec(entry=""),
        batch=nbm.BatchSpec(microbatch=1),
        training=nbm.TrainingSpec(lr=0.0),
    )
    nb.path = path
    return nb


_RUN_WRITTEN_BY_RUNS = {"status", "stop_reason", "phase", "started", "ended", "peak_mib", "duration_s"}


def human_changes(old: nbm.Notebook, new: nbm.Notebook) -> list[str]:
    """What changed between two readings that a person (or the CLI) wrote, not a run writing its own row.

    A run writes its row when it is created and when it ends (status, stop reason, phase, times, peak):
    those changes, and new rows, are Cockpit's own and are not announced.
    """
    out: list[str] = []
    for f in dataclasses.fields(new):
        if f.name in ("runs", "path", "digest"):
            continue
        if getattr(old, f.name) != getattr(new, f.name):
            out.append(f.name)
    before = {r.id: r for r in old.runs}
    for row in new.runs:
        was = before.get(row.id)
        if was is None:
            continue
        mine = {k: v for k, v in dataclasses.asdict(row).items() if k not in _RUN_WRITTEN_BY_RUNS}
        theirs = {k: v for k, v in dataclasses.asdict(was).items() if k not in _RUN_WRITTEN_BY_RUNS}
        if mine != theirs:
            out.append(f"run {row.id}")
    gone = set(before) - {r.id for r in new.runs}
    out += [f"run {rid} removed" for rid in sorted(gone)]
    return out
